"""A stand-alone app serving one study only: `python -m mascot.web.study_app STUDY.db [--port N]`.

`mascot web --study STUDY.db` serves the study next to the group chat; this small app is for a
machine that should expose the study pages and nothing else (and for tests that need a real server).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fastapi import FastAPI

from mascot.web import error_pages
from mascot.web.favicon import add_favicon
from mascot.web.study_routes import mount_study


def study_app(study_db: Path | str) -> FastAPI:
    app = FastAPI(title="MASCOT study", docs_url=None, redoc_url=None, openapi_url=None)
    return error_pages.install(add_favicon(mount_study(app, study_db)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve one study's rater and results pages.")
    parser.add_argument("study", type=Path)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    if not args.study.is_file():
        parser.error(f"{args.study}: no such study file (make one with `mascot study create`)")
    import uvicorn

    uvicorn.run(study_app(args.study), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
