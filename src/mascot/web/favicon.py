"""The site icon: browsers ask every site for /favicon.ico, and an unanswered request is a 404 in
the server's log for every page. The icon is an SVG (a speech bubble of three companions), served
at that address with its own content type; the pages' <head> links it too."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import Response

ICON = Path(__file__).resolve().parent / "static" / "favicon.svg"
ICON_TYPE = "image/svg+xml"


def add_favicon(app: FastAPI) -> FastAPI:
    """Answers /favicon.ico on `app` (the chat app and the study-only app)."""

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> Response:
        return Response(ICON.read_bytes(), media_type=ICON_TYPE, headers={"cache-control": "max-age=86400", "x-content-type-options": "nosniff"})

    return app
