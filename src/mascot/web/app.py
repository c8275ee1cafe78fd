"""The web app: `create_app(settings, clients=None)` builds it; `mascot web` serves it with uvicorn.

Without `clients` the app opens the Director's and the Speakers' backends from the settings when it
starts (the embedded local model by default, an OpenAI-compatible endpoint by flag) and closes them
when it stops; tests pass scripted clients instead.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.middleware.trustedhost import TrustedHostMiddleware

from mascot.llm.base import ChatClient
from mascot.web import chat_routes, study_routes
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


def create_app(settings: WebSettings, clients: dict[str, ChatClient] | None = None) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        backends = None
        if clients is None:
            import asyncio

            from mascot.dialogue.chat import chat_backends, preload_local_models

            backends, identities = await asyncio.to_thread(chat_backends, settings)
            app.state.sessions = WebSessions(settings.session_dir, settings, {role: backends[role] for role in backends.endpoints}, identities)
            await preload_local_models(backends)
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
    if clients is not None:
        app.state.sessions = WebSessions(settings.session_dir, settings, clients)
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts(settings))
    app.add_middleware(GuardMiddleware, max_body_bytes=settings.max_body_bytes)
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")
    app.include_router(chat_routes.router)
    if settings.study is not None:  # the human-study pages of one study file, beside the chat
        study_routes.mount_study(app, settings.study)
    return app


def serve(settings: WebSettings) -> None:
    """Serves the app until Ctrl-C."""
    import uvicorn

    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="warning")
