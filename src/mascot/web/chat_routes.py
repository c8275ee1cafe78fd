"""Group-chat pages and endpoints: pick a roster (or upload one), talk with the group, watch the
replies stream, continue or export a saved session."""

from __future__ import annotations

import asyncio
import logging

from fastapi import APIRouter, Depends, File, Form, HTTPException, Request, UploadFile
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from pydantic import BaseModel

from mascot.dialogue.director import fallback_note
from mascot.errors import MascotError
from mascot.rosters import RosterError
from mascot.web.error_pages import sentence
from mascot.web.events import DONE, QueueListener, colour_index, sse
from mascot.web.feedback import RATINGS, ReplyChoice, ReplyRating
from mascot.web.security import require_csrf, scrub
from mascot.web.sessions import SessionNotFound, WebSessions, readable_time

router = APIRouter()
log = logging.getLogger(__name__)


class MessageIn(BaseModel):
    text: str


class RatingIn(BaseModel):
    turn_idx: int
    rating: str


class TurnIn(BaseModel):
    turn_idx: int
    of: str = "reply"  # "reply": the same companion again; "direction": the Director decides again


class ChoiceIn(BaseModel):
    turn_idx: int
    chosen: str  # "shown" (the reply first given) or "alternative"


def sessions_of(request: Request) -> WebSessions:
    """The sessions this request may reach: with accounts, the logged-in person's own (set by the
    login check); otherwise the app's."""
    return getattr(request.state, "sessions", None) or request.app.state.sessions


def page(request: Request, template: str, status_code: int = 200, **values) -> HTMLResponse:
    return request.app.state.templates.TemplateResponse(request, template, values, status_code=status_code)


def bounded_text(request: Request, text: str, what: str, *, allow_empty: bool = False) -> str:
    """The text stripped; 422 when it is empty (unless allowed) or longer than the app accepts."""
    limit = request.app.state.settings.max_message_chars
    text = text.strip()
    if not text and not allow_empty:
        raise HTTPException(status_code=422, detail=f"The {what} is empty: write something first.")
    if len(text) > limit:
        raise HTTPException(status_code=422, detail=f"The {what} is too long: at most {limit} characters (it has {len(text)}).")
    return text


@router.get("/", response_class=HTMLResponse)
async def index(request: Request, roster: str | None = None) -> HTMLResponse:
    sessions = sessions_of(request)
    limit = request.app.state.settings.max_message_chars
    return page(request, "index.html", rosters=sessions.rosters(), chosen=roster, sessions=sessions.summaries(), max_chars=limit)


@router.post("/rosters", dependencies=[Depends(require_csrf)])
async def upload_roster(request: Request, roster_file: UploadFile | str | None = File(None)) -> Response:
    # A form sent without a file chosen carries an empty part (or none): a sentence, not a 422 JSON.
    data = await roster_file.read() if hasattr(roster_file, "read") else b""
    if not data.strip():
        message = "No roster file was chosen (or the file is empty): choose a YAML or JSON roster file, then press Upload."
        return page(request, "error.html", 422, title="No roster to upload", message=message)
    try:
        key, _ = sessions_of(request).add_roster(data)
    except RosterError as exc:
        return page(request, "error.html", 422, title="This roster cannot be used", message=sentence(str(exc)))
    return RedirectResponse(f"/?roster={key}", status_code=303)


@router.post("/sessions", dependencies=[Depends(require_csrf)])
async def start_session(request: Request, roster: str = Form(...), situation: str = Form("")) -> Response:
    situation = bounded_text(request, situation, "situation", allow_empty=True)
    try:
        session = sessions_of(request).create(roster, situation or None)
    except MascotError as exc:
        return page(request, "error.html", 422, title="The session cannot start", message=sentence(scrub(str(exc))))
    return RedirectResponse(f"/sessions/{session.session_id}", status_code=303)


@router.get("/sessions/{session_id}", response_class=HTMLResponse)
async def session_page(request: Request, session_id: str) -> HTMLResponse:
    try:
        session = sessions_of(request).get(session_id)
    except SessionNotFound as exc:
        return page(
            request, "error.html", 404, title="No such session", message=sentence(f"{exc}: it may have been removed, or the address is mistyped")
        )
    except MascotError as exc:
        return page(request, "error.html", 422, title="This session cannot be continued", message=sentence(scrub(str(exc))))
    names = session.roster.names
    colours = {name: colour_index(name, names) for name in names}
    started = readable_time(session.created_at)
    settings = request.app.state.settings
    ratings = sessions_of(request).latest_ratings(session_id) if settings.feedback else {}
    return page(
        request,
        "session.html",
        session=session,
        session_id=session_id,
        colours=colours,
        started=started,
        max_chars=settings.max_message_chars,
        fallback_note=fallback_note,
        feedback=settings.feedback,
        ratings={turn: r.rating for turn, r in ratings.items()},
    )


@router.get("/sessions/{session_id}/export.jsonl")
async def export_session(request: Request, session_id: str) -> Response:
    try:
        data = sessions_of(request).export(session_id)
    except SessionNotFound as exc:
        raise HTTPException(status_code=404, detail=str(exc)) from None
    headers = {"content-disposition": f'attachment; filename="{session_id}.jsonl"'}
    return Response(data, media_type="application/x-ndjson", headers=headers)


@router.get("/sessions/{session_id}/delete", response_class=HTMLResponse)
async def confirm_delete(request: Request, session_id: str) -> HTMLResponse:
    """Asks before deleting: a deleted conversation cannot be brought back."""
    try:
        session = sessions_of(request).get(session_id)
    except SessionNotFound as exc:
        raise HTTPException(status_code=404, detail=str(exc)) from None
    opening = next((t.response for t in session.turns if t.is_user), "")
    return page(request, "confirm_delete.html", session_id=session_id, opening=opening[:200])


@router.post("/sessions/{session_id}/delete", dependencies=[Depends(require_csrf)])
async def delete_session(request: Request, session_id: str) -> Response:
    """Deletes one conversation, with its ratings, for good."""
    sessions = sessions_of(request)
    try:
        slot = await sessions.claim(session_id)  # never while a reply is being written into it
        if slot is None:
            raise HTTPException(
                status_code=409, detail="The group is still answering in this conversation: wait for the reply to end, then delete it."
            )
        try:
            sessions.delete(session_id)
        finally:
            slot.release()
    except SessionNotFound as exc:
        raise HTTPException(status_code=404, detail=str(exc)) from None
    return RedirectResponse("/", status_code=303)


@router.get("/api/sessions")
async def list_sessions(request: Request) -> list[dict]:
    return [vars(s) for s in sessions_of(request).summaries()]


@router.post("/api/sessions/{session_id}/messages", dependencies=[Depends(require_csrf)])
async def send_message(request: Request, session_id: str, message: MessageIn) -> StreamingResponse:
    """Sends the person's message; the answer is a stream of server-sent events (see events.py)."""
    sessions = sessions_of(request)
    text = bounded_text(request, message.text, "message")
    try:
        session = sessions.get(session_id)
    except SessionNotFound as exc:
        raise HTTPException(status_code=404, detail=str(exc)) from None
    sessions.check_message_rate()
    slot = await sessions.claim(session_id)
    if slot is None:
        raise HTTPException(
            status_code=409,
            detail="The group is still answering the last message: wait for the reply to end, then send yours." + getattr(sessions, "busy_note", ""),
        )
    sessions.alternatives.pop(session_id, None)  # a reply offered beside the last one is no longer to choose
    queue: asyncio.Queue = asyncio.Queue()
    task = asyncio.create_task(answer(session, text, queue, slot))
    request.app.state.tasks.add(task)
    task.add_done_callback(request.app.state.tasks.discard)
    return StreamingResponse(stream_events(queue), media_type="text/event-stream", headers={"x-accel-buffering": "no"})


@router.post("/api/sessions/{session_id}/feedback", dependencies=[Depends(require_csrf)])
async def rate_reply(request: Request, session_id: str, rating: RatingIn) -> dict:
    """A person's rating of one companion's reply: helpful or not (the newest rating of a reply counts)."""
    session = feedback_session(request, session_id)
    if rating.rating not in RATINGS:
        raise HTTPException(status_code=422, detail=f"A rating is {' or '.join(RATINGS)}.")
    turn = next((t for t in session.turns if t.turn_idx == rating.turn_idx and not t.is_user and t.response), None)
    if turn is None:
        raise HTTPException(status_code=422, detail="There is no companion's reply to rate at that place in this conversation.")
    sessions = sessions_of(request)
    sessions.add_feedback(ReplyRating(session_id=session_id, turn_idx=turn.turn_idx, agent_name=turn.agent_name or "", rating=rating.rating,
                                      response=turn.response, speaker_version=version_of(turn), consent=sessions.feedback_consent))  # fmt: skip
    return {"turn_idx": turn.turn_idx, "rating": rating.rating}


def feedback_session(request: Request, session_id: str):
    """The session a feedback request is about (404 when rating is off or the session unknown)."""
    if not request.app.state.settings.feedback:
        raise HTTPException(status_code=404, detail="Rating replies is turned off in this app.")
    try:
        return sessions_of(request).get(session_id)
    except SessionNotFound as exc:
        raise HTTPException(status_code=404, detail=str(exc)) from None


@router.post("/api/sessions/{session_id}/alternative", dependencies=[Depends(require_csrf)])
async def another_reply(request: Request, session_id: str, body: TurnIn) -> dict:
    """Another answer to the latest moment, shown beside the first for the person to choose: the
    same companion's other reply, or (`of: "direction"`) the Director's other option and the reply
    of the companion it names."""
    session = feedback_session(request, session_id)
    if body.of not in ("reply", "direction"):
        raise HTTPException(status_code=422, detail='Another answer is of "reply" or "direction".')
    sessions = sessions_of(request)
    slot = await sessions.claim(session_id)
    if slot is None:
        raise HTTPException(status_code=409, detail="The group is still answering: wait for the reply to end, then ask for another.")
    try:
        asked = sessions.alternatives_asked.get(session_id, 0) + 1
        sessions.alternatives_asked[session_id] = asked
        if body.of == "direction":
            turn, version = await session.alternative_direction(body.turn_idx, asked)
            text = turn.response
        else:
            (text, version), turn = await session.alternative_reply(body.turn_idx, asked), None
    except MascotError as exc:
        raise HTTPException(status_code=422, detail=sentence(scrub(str(exc)))) from None
    finally:
        slot.release()
    sessions.alternatives[session_id] = (body.turn_idx, text, version, turn)
    answer = {"turn_idx": body.turn_idx, "text": text, "of": body.of}
    if turn is not None and turn.directive is not None:
        answer.update(agent=turn.agent_name, action=turn.directive.action, tone=turn.directive.tone)
    return answer


@router.post("/api/sessions/{session_id}/choice", dependencies=[Depends(require_csrf)])
async def choose_reply(request: Request, session_id: str, choice: ChoiceIn) -> dict:
    """The person's choice between the reply given and the alternative: kept, and the chosen one stays in the conversation."""
    session = feedback_session(request, session_id)
    sessions = sessions_of(request)
    pending = sessions.alternatives.get(session_id)
    if pending is None or pending[0] != choice.turn_idx or choice.chosen not in ("shown", "alternative"):
        raise HTTPException(status_code=422, detail="There is no pair of replies to choose between at that place: ask for another reply first.")
    slot = await sessions.claim(session_id)
    if slot is None:
        raise HTTPException(status_code=409, detail="The group is still answering: wait for the reply to end, then choose.")
    try:
        sessions.alternatives.pop(session_id, None)
        last = session.turns[-1]
        if last.turn_idx != choice.turn_idx:  # the conversation went on since: that reply is part of it now
            raise HTTPException(status_code=422, detail="The conversation went on since: only the latest reply can be swapped for another.")
        other = pending[3] if pending[3] is not None else last.model_copy(update={"response": pending[1]})
        shown, alternative = (last.model_copy(), version_of(last)), (other, pending[2])  # a copy: replacing the reply changes `last` in place
        if choice.chosen == "alternative":
            if pending[3] is not None:
                session.replace_turn(choice.turn_idx, other, pending[2])
            else:
                session.replace_reply(choice.turn_idx, pending[1], pending[2])
    finally:
        slot.release()
    (chosen, chosen_version), (rejected, rejected_version) = (alternative, shown) if choice.chosen == "alternative" else (shown, alternative)
    direction = pending[3] is not None
    sessions.add_feedback(ReplyChoice(
        session_id=session_id, turn_idx=choice.turn_idx, agent_name=chosen.agent_name or "", chosen=chosen.response, rejected=rejected.response,
        chosen_version=chosen_version, rejected_version=rejected_version, chose_alternative=choice.chosen == "alternative",
        alternative_of="direction" if direction else "reply", chosen_directive=chosen.directive if direction else None,
        rejected_directive=rejected.directive if direction else None, rejected_agent=rejected.agent_name if direction else None,
        consent=sessions.feedback_consent))  # fmt: skip
    return {
        "turn_idx": choice.turn_idx,
        "response": chosen.response,
        "agent": chosen.agent_name,
        "colour": colour_index(chosen.agent_name or "", session.roster.names),
    }


def version_of(turn) -> str | None:
    """The Speaker version a saved turn records (`speaker_version`), if any."""
    return (turn.model_extra or {}).get("speaker_version")


async def answer(session, text: str, queue: asyncio.Queue, slot) -> None:
    """Plays the message's rounds (saved as they end); runs on even if the browser goes away."""
    try:
        await session.send(text, QueueListener(queue, session.roster.names))
    except MascotError as exc:  # a backend failure ends this message's rounds, not the session
        session.count_failed_round()
        reason = scrub(str(exc)).rstrip(".")
        queue.put_nowait(("error", {"message": f"The group could not answer: {reason}. Your message is saved; send another to try again."}))
    except Exception:  # a fault of the app itself: logged whole here, one plain line for the page
        log.exception("answering a message of session %s failed", session.session_id)
        queue.put_nowait(("error", {"message": "Something went wrong on the server. Your message is saved; the server's log has the details."}))
    finally:
        slot.release()
        queue.put_nowait(DONE)


async def stream_events(queue: asyncio.Queue):
    while (item := await queue.get()) is not DONE:
        yield sse(*item)
    yield sse("done", {})
