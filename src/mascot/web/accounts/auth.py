"""Who is asking: the login cookie (a random token whose SHA-256 the database keeps) and the
check every chat page and endpoint passes through when accounts are on.

The cookie is HttpOnly and SameSite=Lax (a link from elsewhere opens the app logged in, a form
posted from elsewhere carries no cookie and fails the CSRF check anyway), and Secure when the
request came over HTTPS (directly, or through a proxy the app trusts; see docs/web.md) or the
operator says so (`--secure-cookies`).
"""

from __future__ import annotations

from urllib.parse import quote

from fastapi import HTTPException, Request
from fastapi.responses import RedirectResponse, Response

from mascot.web.accounts.repository import LOGIN_DAYS, Accounts
from mascot.web.accounts.store import PersonSessions
from mascot.web.accounts.tables import Person

LOGIN_COOKIE = "mascot_login"


class LoginRequired(Exception):
    """A page asked for without a login: answered with a redirect to the login page."""

    def __init__(self, next_path: str) -> None:
        self.next_path = next_path


def accounts_of(request: Request) -> Accounts:
    return request.app.state.accounts


def logged_in(request: Request) -> Person | None:
    """The person of this request's login cookie (None: no valid login); read once per request."""
    if "person" not in request.state._state:
        request.state.person = accounts_of(request).person_for_login(request.cookies.get(LOGIN_COOKIE, ""))
    return request.state.person


async def require_person(request: Request) -> Person:
    """The dependency of every chat route: the logged-in person, whose own sessions the route then
    reaches (`request.state.sessions`). Pages without a login redirect to /login; API calls are 401."""
    person = logged_in(request)
    if person is None:
        if request.method == "GET" and not request.url.path.startswith("/api/"):
            raise LoginRequired(request.url.path)
        raise HTTPException(status_code=401, detail="You are not logged in (or your login ended): log in again.")
    request.state.sessions = PersonSessions(request.app.state.shared, person)
    return person


async def require_admin(request: Request) -> Person:
    person = await require_person(request)
    if person.role != "admin":
        raise HTTPException(status_code=404, detail="Not Found")  # the admin pages do not exist for anyone else
    return person


def login_redirect(request: Request, exc: LoginRequired) -> Response:
    return RedirectResponse(f"/login?next={quote(exc.next_path)}", status_code=303)


def secure_request(request: Request) -> bool:
    return request.url.scheme == "https" or bool(getattr(request.app.state.settings, "secure_cookies", False))


def set_login_cookie(request: Request, response: Response, token: str) -> None:
    response.set_cookie(LOGIN_COOKIE, token, max_age=LOGIN_DAYS * 86400, path="/", httponly=True, samesite="lax", secure=secure_request(request))


def clear_login_cookie(request: Request, response: Response) -> None:
    response.delete_cookie(LOGIN_COOKIE, path="/", httponly=True, samesite="lax", secure=secure_request(request))


def safe_next(path: str | None) -> str:
    """Where to go after logging in: a path of this app only (never another site)."""
    if not path or not path.startswith("/") or path.startswith("//") or "\\" in path:
        return "/"
    return path
