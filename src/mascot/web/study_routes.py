"""The human-study pages and endpoints, mounted by `mascot.web.app`.

A rater's link `/study/r/<token>` reaches that rater's items only: items are addressed by
(token, position), never by a global id. The owner's results page sits behind the owner token that
`mascot study create` prints. The app names the study file in `app.state.study_db` (see
`mount_study`). Every page is rendered with autoescaping; forms carry a CSRF token; request bodies
are bounded; a rating is committed to disk before the answer goes back.
"""

from __future__ import annotations

import hmac
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.concurrency import run_in_threadpool

from mascot.study import METRIC_LABELS, METRICS
from mascot.study.db import Item, StudyError, existing_rating, meta, opened, rater_id_for, rater_item, rater_progress
from mascot.study.rating import RatingError, submit
from mascot.study.results import compute_results, ratings_csv
from mascot.web.security import SECURITY_HEADERS
from mascot.web.study_csrf import CSRF_FIELD, csrf_ok, csrf_token

router = APIRouter(prefix="/study")
MAX_FORM_BYTES = 16 * 1024  # a rating form is well under 1 KiB
STATIC_DIR = Path(__file__).parent / "static"
STATIC_TYPES = {"study.js": "text/javascript", "study.css": "text/css"}
_templates = Environment(loader=PackageLoader("mascot.web", "templates"), autoescape=select_autoescape(default=True, default_for_string=True))


class BodyTooLarge(Exception):
    pass


def mount_study(app: FastAPI, study_db: Path | str) -> FastAPI:
    """Serves the study in `study_db` from `app` (for `mascot web --study` and tests)."""
    app.state.study_db = Path(study_db)
    app.include_router(router)
    return app


def page(template: str, status: int = 200, **values: Any) -> HTMLResponse:
    html = _templates.get_template(f"study/{template}").render(**values)
    return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)


def message(heading: str, text: str, status: int, back: str | None = None) -> HTMLResponse:
    return page("message.html", status, heading=heading, message=text, is_error=status >= 400, back=back)


def study_path(request: Request) -> Path | None:
    path = getattr(request.app.state, "study_db", None)
    return Path(path) if path is not None and Path(path).is_file() else None


def not_found() -> HTMLResponse:
    return message("Link not valid", "This study link is not valid. Please check the address you were given.", 404)


@router.get("/static/{name}")
def study_static(name: str) -> Response:
    """The study's script and style sheet, served under /study so a study-only app has them too.
    The pages carry the app's one security policy (`mascot.web.security`), which Referrer-Policy
    no-referrer is part of: the link token is in the URL and must never be sent on."""
    if name not in STATIC_TYPES:
        return not_found()
    return Response((STATIC_DIR / name).read_text(encoding="utf-8"), media_type=STATIC_TYPES[name], headers=SECURITY_HEADERS)


@router.get("/r/{token}", response_class=HTMLResponse)
def rater_home(request: Request, token: str) -> HTMLResponse:
    path = study_path(request)
    if path is None:
        return not_found()
    with opened(path) as conn:
        rater = rater_id_for(conn, token)
        if rater is None:
            return not_found()
        rated, total, next_position = rater_progress(conn, rater)
    return page("rater_home.html", token=token, rated=rated, total=total, next_position=next_position)


def _item_values(item: Item, token: str, secret: str, total: int, previous: dict | None) -> dict[str, Any]:
    conversations = [
        ("1", item.episode_a if item.left_side == "a" else item.episode_b),
        ("2", item.episode_b if item.left_side == "a" else item.episode_a),
    ]
    shown: dict[str, int] = {}
    chosen = None
    if previous:
        chosen = "tie" if previous["choice"] == "tie" else item.shown_of(previous["choice"])
        for side, scores in previous["scores"].items():
            shown.update({f"{metric}_{item.shown_of(side)}": value for metric, value in scores.items()})
    return {
        "token": token,
        "position": item.position,
        "total": total,
        "context": item.context,
        "conversations": conversations,
        "metrics": [(m, METRIC_LABELS[m]) for m in METRICS],
        "csrf": csrf_token(secret, token),
        "chosen": chosen,
        "previous": shown,
    }


def _load_item(path: Path, token: str, position: int) -> tuple[Item, str, int, dict | None] | None:
    with opened(path) as conn:
        rater = rater_id_for(conn, token)
        item = rater_item(conn, rater, position) if rater is not None else None
        if item is None:
            return None
        _, total, _ = rater_progress(conn, rater)
        return item, meta(conn)["csrf_secret"], total, existing_rating(conn, item.item_id)


@router.get("/r/{token}/{position}", response_class=HTMLResponse)
def item_page(request: Request, token: str, position: int) -> HTMLResponse:
    path = study_path(request)
    loaded = _load_item(path, token, position) if path is not None else None
    if loaded is None:
        return not_found()
    item, secret, total, previous = loaded
    return page("item.html", **_item_values(item, token, secret, total, previous))


async def read_form(request: Request, limit: int = MAX_FORM_BYTES) -> dict[str, str]:
    """The url-encoded form, refusing more than `limit` bytes (declared or streamed)."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > limit:
            raise BodyTooLarge
    return dict(parse_qsl(body.decode("utf-8", errors="replace"), keep_blank_values=True))


@router.post("/r/{token}/{position}")
async def submit_rating(request: Request, token: str, position: int) -> Response:
    path = study_path(request)
    loaded = await run_in_threadpool(_load_item, path, token, position) if path is not None else None
    if loaded is None:
        return not_found()
    item, secret, total, _ = loaded
    try:
        form = await read_form(request)
    except BodyTooLarge:
        return message("Submission too large", f"The form sent is larger than {MAX_FORM_BYTES // 1024} KiB; nothing was saved.", 413)
    if not csrf_ok(secret, token, form.get(CSRF_FIELD)):
        return message("Form expired", "This form could not be verified. Please reload the page and answer again; nothing was saved.", 403)
    try:
        await run_in_threadpool(submit, path, token, position, form)
    except RatingError as exc:
        values = _item_values(item, token, secret, total, None)
        values.update(chosen=form.get("choice"), previous=_answers_given(form))  # the rater keeps what they ticked
        return page("item.html", 400, error=f"Not saved: {exc}.", **values)
    except StudyError:
        return not_found()
    return RedirectResponse(await run_in_threadpool(_next_url, path, token), status_code=303, headers=SECURITY_HEADERS)


def _answers_given(form: dict[str, str]) -> dict[str, int]:
    fields = (f"{metric}_{shown}" for metric in METRICS for shown in ("1", "2"))
    return {name: int(form[name]) for name in fields if form.get(name, "") in {"1", "2", "3", "4", "5"}}


def _next_url(path: Path, token: str) -> str:
    with opened(path) as conn:
        rater = rater_id_for(conn, token)
        _, _, next_position = rater_progress(conn, rater)
    return f"/study/r/{token}/{next_position}" if next_position is not None else f"/study/r/{token}"


def _owner_ok(path: Path | None, owner: str) -> bool:
    if path is None:
        return False
    with opened(path) as conn:
        return hmac.compare_digest(str(meta(conn).get("owner_token", "")), owner)


@router.get("/results/{owner}", response_class=HTMLResponse)
def results_page(request: Request, owner: str) -> HTMLResponse:
    path = study_path(request)
    if not _owner_ok(path, owner):
        return not_found()
    return page("results.html", r=compute_results(path), owner=owner, labels=METRIC_LABELS)


@router.get("/results/{owner}/ratings.csv")
def results_csv(request: Request, owner: str) -> Response:
    path = study_path(request)
    if not _owner_ok(path, owner):
        return not_found()
    headers = {**SECURITY_HEADERS, "Content-Disposition": 'attachment; filename="study_ratings.csv"'}
    return Response(ratings_csv(path), media_type="text/csv", headers=headers)
