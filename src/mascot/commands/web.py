"""`mascot web`: the local web app (group chat; the human-study pages)."""

from __future__ import annotations

from mascot.commands.dryrun import check_endpoints, print_settings
from mascot.dialogue.chat import CHAT_ROLES
from mascot.llm.base import redact_url
from mascot.llm.routing import resolve_roles, with_safety
from mascot.settings import as_dict
from mascot.web.app import serve
from mascot.web.security import scrub
from mascot.web.settings import WebSettings


def run_web(settings: WebSettings) -> None:
    """Serves the app; its address is printed once it listens (the models load first), and a
    port another program holds is one line at once."""
    import typer

    if not settings.loopback_only and not settings.accounts:
        typer.secho(f"warning: --host {settings.host} lets other machines reach the app; it has no login (add --accounts)", fg="yellow", err=True)
    if settings.accounts:
        print_accounts_state(settings)

    def bound() -> None:
        if settings.workers > 1:
            typer.secho(f"mascot web: {settings.workers} processes on {web_address(settings)}, each loading the models (Ctrl-C stops)", fg="green")
        else:
            typer.secho(f"mascot web: port {settings.port} reserved; starting (models load first, then the address is printed)")

    def listening() -> None:
        typer.secho(f"mascot web on {web_address(settings)} (sessions in {settings.session_dir}; Ctrl-C stops)", fg="green")
        if settings.study is not None:
            print_study_links(settings)

    serve(settings, on_bound=bound, on_listening=listening)


def print_accounts_state(settings: WebSettings) -> None:
    """The accounts database (migrated now, so that a wrong URL stops here in one line) and how
    people get in."""
    import typer

    from mascot.web.accounts.database import open_database, redacted
    from mascot.web.accounts.repository import Accounts

    engine, factory = open_database(settings.database)
    people = Accounts(factory).count_people()
    engine.dispose()
    typer.echo(
        f"accounts: {people} in {redacted(settings.database)}; sign-up is {settings.signup}"
        + (f"; conversations older than {settings.retain_days:g} days are deleted" if settings.retain_days else "")
    )
    if people == 0:
        where = f"--session-dir {settings.session_dir}" if settings.database_url is None else "--database-url URL"
        typer.secho(f"no accounts yet: create the first admin with `mascot web users create USERNAME --admin {where}`", fg="yellow")


def print_study_links(settings: WebSettings) -> None:
    """The served study's links, as `mascot study create` printed them, at this app's address."""
    from mascot.commands.study import print_links
    from mascot.study.db import meta, opened, rater_tokens

    with opened(settings.study) as conn:
        tokens, owner = rater_tokens(conn), meta(conn)["owner_token"]
    print_links(web_address(settings).rstrip("/"), tokens, owner)


def web_address(settings: WebSettings) -> str:
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    return f"http://{host}:{settings.port}/"


def dry_run_web(command: str, settings: WebSettings) -> None:
    """Checks the models and endpoints the app would open and prints the resolved settings (URLs
    without credentials); starts nothing."""

    roles = check_endpoints(resolve_roles(settings, with_safety(settings, CHAT_ROLES)))
    values = as_dict(settings)
    if settings.accounts:  # the URL must name a database; nothing connects
        from mascot.web.accounts.database import make_engine, redacted

        make_engine(settings.database).dispose()
        values["database_url"] = redacted(settings.database)
    for name in ("vllm_server_url", "director_server_url", "speaker_server_url", "safety_server_url"):
        values[name] = [redact_url(url) for url in values[name] or []] or None
    print_settings(command, {**values, "roles": {role: scrub(how) for role, how in roles.items()}})
