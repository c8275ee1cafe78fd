"""What keeps the web app safe to open on a shared machine: CSRF tokens, bounded requests, strict
response headers, unguessable ids, and error text scrubbed of credentials.

CSRF (double submit): every page response carries a random token in an HttpOnly, SameSite=Strict
cookie, and the page repeats it (a `<meta name="csrf-token">` tag and hidden form fields). A
mutating request must send the same value back, in the `X-CSRF-Token` header (fetch) or the
`csrf_token` form field; `require_csrf` is the FastAPI dependency that checks it.

    from mascot.web.security import csrf_token, require_csrf
    @router.post("/x", dependencies=[Depends(require_csrf)])  # 403 without a matching token
    templates: {{ csrf_token(request) }} in a hidden field named "csrf_token"
"""

from __future__ import annotations

import os
import re
import secrets

from fastapi import HTTPException, Request
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSRF_COOKIE = "mascot_csrf"
CSRF_HEADER = "x-csrf-token"
CSRF_FORM_FIELD = "csrf_token"
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{32,128}$")
_SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
_URL_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s]+@")
_KEY_ENVIRONMENT = ("OPENAI_API_KEY", "JUDGE_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY")
# The one policy of every page, the chat's and the study's alike: scripts and styles come from the
# app's own files only (no inline script or style anywhere), so a single header serves them all.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
SECURITY_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


def new_id(prefix: str = "") -> str:
    """An unguessable id (128 random bits, URL-safe)."""
    return prefix + secrets.token_urlsafe(16)


def csrf_token(request: Request) -> str:
    """This request's CSRF token: the browser's cookie when it holds a well-formed one, else a new
    one (which the middleware sets as the cookie on the way out)."""
    token = getattr(request.state, "csrf_token", None)
    if token is None:
        cookie = request.cookies.get(CSRF_COOKIE, "")
        token = cookie if _TOKEN.match(cookie) else secrets.token_urlsafe(32)
        request.state.csrf_token = token
    return token


async def require_csrf(request: Request) -> None:
    """FastAPI dependency for every mutating route: the header or form token must equal the cookie's."""
    cookie = request.cookies.get(CSRF_COOKIE, "")
    sent = request.headers.get(CSRF_HEADER, "")
    if not sent and request.headers.get("content-type", "").startswith(("application/x-www-form-urlencoded", "multipart/form-data")):
        sent = str((await request.form()).get(CSRF_FORM_FIELD, ""))
    if not (_TOKEN.match(cookie) and secrets.compare_digest(cookie, sent)):
        raise HTTPException(
            status_code=403, detail="This page's security token is missing or out of date (CSRF check): reload the page and try again."
        )


def scrub(text: str) -> str:
    """Text safe to show in a browser: user:password@ dropped from URLs, API keys masked."""
    text = _URL_CREDENTIALS.sub(r"\1", text)
    for name in _KEY_ENVIRONMENT:
        key = os.environ.get(name) or ""
        if len(key) >= 4:
            text = text.replace(key, "***")
    return text


def with_security_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """`headers` plus each security header they lack (names compared without case)."""
    present = {name.lower() for name, _ in headers}
    return headers + [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items() if k.encode() not in present]


class GuardMiddleware:
    """Bounds request bodies (413 past `max_body_bytes`, 411 for a body of unknown length on a
    mutating request), adds the security headers a response does not already carry (each header
    once: two policies would both be enforced), and sets the CSRF cookie a page handed out."""

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        state = scope.setdefault("state", {})

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = with_security_headers(list(message.get("headers", [])))
                token = state.get("csrf_token")
                if token:
                    cookie = f"{CSRF_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict"
                    headers.append((b"set-cookie", cookie.encode()))
                message["headers"] = headers
            await send(message)

        await self.app(scope, self._bounded(receive), send_with_headers)

    def _refusal(self, scope: Scope) -> PlainTextResponse | None:
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None:
            if not length.isdigit() or int(length) > self.max_body_bytes:
                return PlainTextResponse(f"The request is too large: at most {self.max_body_bytes} bytes are accepted.", status_code=413)
        elif scope["method"] not in _SAFE_METHODS and b"chunked" in headers.get(b"transfer-encoding", b""):
            return PlainTextResponse("The request was refused: a request body needs a Content-Length.", status_code=411)
        return None

    def _bounded(self, receive: Receive) -> Receive:
        """Counts what arrives: a body longer than it said it was ends as a disconnect."""
        received = 0

        async def bounded() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    return {"type": "http.disconnect"}
            return message

        return bounded
