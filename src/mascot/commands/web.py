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

    if not settings.loopback_only:
        typer.secho(f"warning: --host {settings.host} lets other machines reach the app; it has no login", fg="yellow", err=True)

    def bound() -> None:
        typer.secho(f"mascot web: port {settings.port} reserved; starting (models load first, then the address is printed)")

    def listening() -> None:
        typer.secho(f"mascot web on {web_address(settings)} (sessions in {settings.session_dir}; Ctrl-C stops)", fg="green")
        if settings.study is not None:
            print_study_links(settings)

    serve(settings, on_bound=bound, on_listening=listening)


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
    for name in ("vllm_server_url", "director_server_url", "speaker_server_url", "safety_server_url"):
        values[name] = [redact_url(url) for url in values[name] or []] or None
    print_settings(command, {**values, "roles": {role: scrub(how) for role, how in roles.items()}})


