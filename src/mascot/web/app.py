"""The web app: `create_app(settings, clients=None)` builds it; `mascot web` serves it with uvicorn.

Without `clients` the app opens the Director's and the Speakers' backends from the settings when it
starts (the embedded local model by default, an OpenAI-compatible endpoint by flag) and closes them
when it stops; tests pass scripted clients instead. `serve` binds the port before anything loads
(a taken port is one line at once) and says the address only when the server listens.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
from collections.abc import Callable
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.middleware.trustedhost import TrustedHostMiddleware

from mascot.errors import MascotError
from mascot.llm.base import ChatClient
from mascot.web import chat_routes, error_pages, study_routes
from mascot.web.favicon import add_favicon
from mascot.web.security import CSRF_FORM_FIELD, GuardMiddleware, csrf_token
from mascot.web.sessions import WebSessions
from mascot.web.settings import LOOPBACK_HOSTS, WebSettings

HERE = Path(__file__).resolve().parent


def make_templates() -> Jinja2Templates:
    """Jinja templates with autoescaping on for every file: model and user text is always escaped."""
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.autoescape = True
    templates.env.globals.update(csrf_token=csrf_token, csrf_field=CSRF_FORM_FIELD)
    return templates


def allowed_hosts(settings: WebSettings) -> list[str]:
    """Host headers the app answers: its own name only, so a web page elsewhere cannot reach a
    loopback server through a rebound DNS name."""
    if not settings.loopback_only:
        return ["*"]
    return [*LOOPBACK_HOSTS, "[::1]", "testserver"]


async def open_backends(app: FastAPI, settings: WebSettings):
    """The settings' backends, opened and their in-process models loaded, behind the app's sessions."""
    from mascot.dialogue.chat import chat_backends, preload_local_models

    backends, identities = await asyncio.to_thread(chat_backends, settings)
    try:
        await backends.preflight()  # a wrong URL or model stops the start in one line; structured outputs probed
        attach_clients(app, settings, {role: backends[role] for role in backends.endpoints}, identities)
        await preload_local_models(backends)
    except BaseException:
        await backends.aclose()  # no connection pool left open behind the one-line error
        raise
    return backends


def attach_clients(app: FastAPI, settings: WebSettings, clients: dict[str, ChatClient], identities=None) -> None:
    """The chat's clients behind the app's sessions: one person's session files, or every person's
    sessions in the accounts database."""
    if settings.accounts:
        from mascot.web.accounts.install import use_clients

        use_clients(app, clients, identities)
    else:
        app.state.sessions = WebSessions(settings.session_dir, settings, clients, identities)


def create_app(settings: WebSettings, clients: dict[str, ChatClient] | None = None, *, smoke_test_model: bool | None = None) -> FastAPI:
    """The app; `smoke_test_model` (shown as a banner) defaults to what the settings' own backends
    would be, and to False for clients passed in."""
    from mascot.dialogue.chat import answers_from_smoke_test_model

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        backends = None
        if clients is None:
            try:
                backends = await open_backends(app, settings)
                if smoke_test_model is None:  # told by the backends the app opened, not resolved again
                    app.state.smoke_test_model = answers_from_smoke_test_model(backends.endpoints)
            except MascotError as exc:  # a model that cannot load: `serve` says it in one line
                app.state.startup_error = exc
                raise
        if settings.accounts:
            from mascot.web.accounts.install import keep_house

            app.state.tasks.add(asyncio.create_task(keep_house(app)))
        try:
            yield
        finally:
            for task in list(app.state.tasks):
                task.cancel()
            if backends is not None:
                await backends.aclose()

    app = FastAPI(title="MASCOT", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.settings = settings
    app.state.templates = make_templates()
    app.state.tasks = set()
    app.state.smoke_test_model = bool(smoke_test_model)  # the settings' own backends say it when they open
    app.state.templates.env.globals["current_person"] = lambda request: None
    if settings.accounts:
        from mascot.web.accounts.install import install_accounts

        install_accounts(app, settings, chat_routes.router)
    else:
        app.include_router(chat_routes.router)
    if clients is not None:
        attach_clients(app, settings, clients)
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts(settings))
    app.add_middleware(GuardMiddleware, max_body_bytes=settings.max_body_bytes)
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")
    add_favicon(app)
    error_pages.install(app)
    if settings.study is not None:  # the human-study pages of one study file, beside the chat
        study_routes.mount_study(app, settings.study)
    return app


def listening_socket(host: str, port: int) -> socket.socket:
    """The app's socket, bound now: a port another program holds is a MascotError, before any
    model loads (uvicorn would load them first, then log a traceback)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise MascotError(
                f"port {port} on {host} is taken by another program: pick another with --port (e.g. --port {port % 65535 + 1})"
            ) from None
        raise MascotError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


SETTINGS_VARIABLE = "MASCOT_WEB_SETTINGS"  # how `--workers N` hands the settings to each process


def app_from_environment() -> FastAPI:
    """The app of one worker process of `mascot web --workers N` (uvicorn's factory)."""
    import base64
    import pickle

    return create_app(pickle.loads(base64.b64decode(os.environ[SETTINGS_VARIABLE])))


def serve_workers(settings: WebSettings, on_bound: Callable[[], None] | None = None) -> None:
    """`--workers N`: N processes on one socket, each with its own models, sharing the accounts
    database (migrated here first, so that no two processes migrate at once)."""
    import base64
    import pickle

    import uvicorn
    from uvicorn.supervisors import Multiprocess

    from mascot.web.accounts.database import open_database

    open_database(settings.database)[0].dispose()
    sock = listening_socket(settings.host, settings.port)
    os.environ[SETTINGS_VARIABLE] = base64.b64encode(pickle.dumps(settings)).decode()
    config = uvicorn.Config("mascot.web.app:app_from_environment", factory=True, host=settings.host, port=settings.port, workers=settings.workers,
                            log_level="warning", proxy_headers=True, forwarded_allow_ips=settings.trusted_proxies)  # fmt: skip
    if on_bound is not None:
        on_bound()
    try:
        Multiprocess(config, sockets=[sock]).run()  # restarts a worker that dies; stops when one cannot start
    finally:
        sock.close()


def serve(
    settings: WebSettings, app: FastAPI | None = None, *, on_bound: Callable[[], None] | None = None, on_listening: Callable[[], None] | None = None
) -> None:
    """Serves the app (built from the settings unless given) until Ctrl-C. `on_bound` runs once
    the port is held, `on_listening` once the app has started (models loaded) and accepts
    connections. With `--workers N` the processes start on their own and `on_listening` is not called."""
    if settings.workers > 1 and app is None:
        serve_workers(settings, on_bound)
        return
    server, sock = web_server(settings, app, on_listening)
    state = server.config.app.state

    def untold(record: logging.LogRecord) -> bool:
        # A start that failed on a MascotError is told below in one line, not as uvicorn's traceback.
        return getattr(state, "startup_error", None) is None

    server_log = logging.getLogger("uvicorn.error")
    server_log.addFilter(untold)
    if on_bound is not None:
        on_bound()
    try:
        server.run(sockets=[sock])
    except SystemExit:  # uvicorn's exit when the app could not start
        error = getattr(state, "startup_error", None)
        if error is not None:
            raise MascotError(f"mascot web could not start: {error}") from None
        raise
    finally:
        server_log.removeFilter(untold)
        sock.close()


def web_server(settings: WebSettings, app: FastAPI | None = None, on_listening: Callable[[], None] | None = None):
    """(uvicorn server, its bound socket): run with `server.run(sockets=[sock])`."""
    import uvicorn

    sock = listening_socket(settings.host, settings.port)

    class AnnouncingServer(uvicorn.Server):
        async def startup(self, sockets=None) -> None:
            await super().startup(sockets)
            if on_listening is not None and not self.should_exit:
                on_listening()

    config = uvicorn.Config(app or create_app(settings), host=settings.host, port=settings.port, log_level="warning", proxy_headers=True,
                            forwarded_allow_ips=settings.trusted_proxies)  # fmt: skip
    return AnnouncingServer(config), sock
