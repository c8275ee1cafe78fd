"""Every refusal the app gives is a sentence a person can act on: the browser's pages get an error
page, the page script's requests (/api/...) a JSON `detail` that it shows as is. Never a bare status
code or FastAPI's raw validation JSON.

    error_pages.install(app)      # after the routers: HTTP errors and unreadable requests
    sentence("the message is empty")  -> "The message is empty."
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from mascot.web.study_routes import message as study_message

# What a status means to a person, for refusals that carry no explanation of their own.
PLAIN_STATUS = {
    400: "The request could not be read.",
    403: "This request was refused.",
    404: "There is nothing at this address.",
    405: "This address does not take that kind of request.",
    409: "The request clashes with one still running: wait for it to end, then try again.",
    413: "The request is too large.",
    422: "The request could not be read.",
}
_STARLETTE_PHRASES = {"Not Found", "Method Not Allowed", "Bad Request", "Forbidden", "Unprocessable Entity", "Conflict", "Request Entity Too Large"}


def sentence(text: str) -> str:
    """`text` as a sentence: a capital first letter and a closing stop."""
    text = " ".join(str(text).split())
    if not text:
        return text
    text = text[0].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else text + "."


def explained(status: int, detail: object) -> str:
    if isinstance(detail, str) and detail and detail not in _STARLETTE_PHRASES:
        return sentence(detail)
    return PLAIN_STATUS.get(status, "The request could not be answered.")


def unreadable(errors: list[dict]) -> str:
    """One sentence for a request FastAPI could not validate: its first problem, by field."""
    if not errors:
        return PLAIN_STATUS[422]
    first = errors[0]
    field = next((str(part) for part in reversed(first.get("loc", ())) if isinstance(part, str) and part not in ("body", "query", "path")), "")
    field = field.replace("_", " ")
    if first.get("type") == "missing":
        return sentence(f"the request has no {field}" if field else "the request has no body")
    return sentence(
        f"the {field} in the request is not valid: {first.get('msg', 'unreadable')}" if field else first.get("msg", "the request could not be read")
    )


def wants_json(request: Request) -> bool:
    return request.url.path.startswith("/api/")


def error_response(request: Request, status: int, message: str) -> Response:
    if wants_json(request):
        return JSONResponse({"detail": message}, status_code=status)
    if request.url.path.startswith("/study/") or not hasattr(request.app.state, "templates"):
        return study_message("Something went wrong", message, status)
    values = {"title": "Something went wrong", "message": message}
    response: HTMLResponse = request.app.state.templates.TemplateResponse(request, "error.html", values, status_code=status)
    return response


def install(app: FastAPI) -> FastAPI:
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        response = error_response(request, exc.status_code, explained(exc.status_code, exc.detail))
        for name, value in (exc.headers or {}).items():
            response.headers.setdefault(name, value)
        return response

    async def validation_error(request: Request, exc: RequestValidationError) -> Response:
        return error_response(request, 422, unreadable(list(exc.errors())))

    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    return app
