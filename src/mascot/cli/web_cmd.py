"""`mascot web`: the local web app (group chat; the human-study pages)."""

from __future__ import annotations

from mascot.cli import app
from mascot.cli.settings_cli import settings_command
from mascot.web.settings import WebSettings


def run_web(settings: WebSettings) -> None:
    import typer

    from mascot.web.app import serve

    typer.secho(f"mascot web on http://{settings.host}:{settings.port}/ (sessions in {settings.session_dir}; Ctrl-C stops)", fg="green")
    if not settings.loopback_only:
        typer.secho(f"warning: --host {settings.host} lets other machines reach the app; it has no login", fg="yellow", err=True)
    serve(settings)


def dry_run_web(command: str, settings: WebSettings) -> None:
    """The resolved settings (endpoint URLs without credentials); starts nothing."""
    import typer

    from mascot.llm.routing import redact_url
    from mascot.settings import as_dict

    for name, value in as_dict(settings).items():
        if name.endswith("server_url") and value:
            value = [redact_url(url) for url in value]
        typer.echo(f"{name}: {value}")
    typer.secho(f"dry run: `mascot {command}` would serve http://{settings.host}:{settings.port}/", fg="green")


app.command("web")(settings_command(WebSettings, run_web, dry_run=dry_run_web))
