"""The account pages: sign up, log in and out, the person's own account (password, consent to
training, export, deletion) and the admin's page (accounts and counts, never content).

Handlers that hash passwords are plain functions: FastAPI runs them in its thread pool, so a
login's deliberate Argon2 cost never holds up the replies streaming beside it.
"""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, Depends, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from mascot.web.accounts import limits
from mascot.web.accounts.auth import (
    LOGIN_COOKIE,
    accounts_of,
    clear_login_cookie,
    require_admin,
    require_person,
    safe_next,
    set_login_cookie,  # fmt: skip
)
from mascot.web.accounts.repository import AccountError, PersonData, digest
from mascot.web.accounts.tables import Person
from mascot.web.security import require_csrf

router = APIRouter()
LOGIN_FAILURES = limits.Limit(5, 900)  # per username
LOGIN_FAILURES_PER_ADDRESS = limits.Limit(30, 900)
SIGNUPS_PER_ADDRESS = limits.Limit(10, 3600)
SIGNUP_MODES = ("open", "invite", "closed")


def page(request: Request, template: str, status_code: int = 200, **values) -> HTMLResponse:
    return request.app.state.templates.TemplateResponse(request, template, values, status_code=status_code)


def signup_mode(request: Request) -> str:
    return request.app.state.settings.signup


def address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def wait_for(request: Request, keys: list[tuple[str, limits.Limit]]) -> float:
    """The longest wait any of the keys asks for (0: none)."""
    with request.app.state.shared.factory() as db:
        return max((limits.seconds_until_free(db, key, limit) for key, limit in keys), default=0.0)


def count(request: Request, keys: list[str], person_id: str | None = None) -> None:
    with request.app.state.shared.factory.begin() as db:
        for key in keys:
            limits.count_event(db, key, person_id)


# ---------------------------------------------------------------------------- sign up, log in, log out


@router.get("/signup", response_class=HTMLResponse)
def signup_page(request: Request) -> HTMLResponse:
    return page(request, "signup.html", mode=signup_mode(request))


@router.post("/signup", dependencies=[Depends(require_csrf)])
def signup(request: Request, username: str = Form(...), password: str = Form(...), invitation: str = Form("")) -> Response:
    mode = signup_mode(request)
    if mode == "closed":
        return page(request, "signup.html", 403, mode=mode, error="Sign-up is closed here: ask the operator for an account.")
    key = f"signup-address:{address(request)}"
    if wait := wait_for(request, [(key, SIGNUPS_PER_ADDRESS)]):
        return page(request, "signup.html", 429, mode=mode, error=f"Too many sign-ups from your address: try again in {limits.minutes(wait)}.")
    if mode == "invite" and not invitation.strip():
        return page(request, "signup.html", 422, mode=mode, username=username, error="Sign-up here needs an invitation code.")
    try:
        person = accounts_of(request).create_person(username, password, invitation=invitation if mode == "invite" else None)
    except AccountError as exc:
        return page(request, "signup.html", 422, mode=mode, username=username, error=str(exc))
    count(request, [key])
    return logged_in_response(request, person, "/")


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request, next: str = "/") -> HTMLResponse:
    return page(request, "login.html", next=safe_next(next), mode=signup_mode(request))


@router.post("/login", dependencies=[Depends(require_csrf)])
def login(request: Request, username: str = Form(...), password: str = Form(...), next: str = Form("/")) -> Response:
    name_key, address_key = f"login:{digest(username.strip().lower())}", f"login-address:{address(request)}"
    values = {"next": safe_next(next), "mode": signup_mode(request), "username": username}
    if wait := wait_for(request, [(name_key, LOGIN_FAILURES), (address_key, LOGIN_FAILURES_PER_ADDRESS)]):
        return page(request, "login.html", 429, **values, error=f"Too many failed logins: try again in {limits.minutes(wait)}.")
    person = accounts_of(request).authenticate(username, password)
    if person is None:
        known = accounts_of(request).by_username(username)
        count(request, [name_key, address_key], known.id if known else None)
        return page(request, "login.html", 401, **values, error="That username and password do not match an account.")
    with request.app.state.shared.factory.begin() as db:
        limits.clear(db, name_key)
    return logged_in_response(request, person, safe_next(next))


def logged_in_response(request: Request, person: Person, to: str) -> Response:
    response = RedirectResponse(to, status_code=303)
    set_login_cookie(request, response, accounts_of(request).start_login(person.id))
    return response


@router.post("/logout", dependencies=[Depends(require_csrf)])
def logout(request: Request) -> Response:
    token = request.cookies.get(LOGIN_COOKIE, "")
    if token:
        accounts_of(request).end_login(token)
    response = RedirectResponse("/login", status_code=303)
    clear_login_cookie(request, response)
    return response


# ---------------------------------------------------------------------------- the person's own account


@router.get("/account", response_class=HTMLResponse)
def account_page(request: Request, person: Person = Depends(require_person), done: str = "") -> HTMLResponse:
    conversations = len(PersonData(request.app.state.shared.factory, person.id).conversations())
    return page(request, "account.html", person=person, conversations=conversations, done=done)


@router.post("/account/password", dependencies=[Depends(require_csrf)])
def change_password(request: Request, current: str = Form(...), new: str = Form(...), person: Person = Depends(require_person)) -> Response:
    try:
        accounts_of(request).change_password(person.id, current, new, keep_login=request.cookies.get(LOGIN_COOKIE))
    except AccountError as exc:
        return page(request, "account.html", 422, person=person, conversations=None, error=str(exc))
    return RedirectResponse("/account?done=password", status_code=303)


@router.post("/account/consent", dependencies=[Depends(require_csrf)])
def set_consent(request: Request, consent: str = Form(""), person: Person = Depends(require_person)) -> Response:
    accounts_of(request).set_consent(person.id, consent == "yes")
    return RedirectResponse("/account?done=consent", status_code=303)


@router.get("/account/export.zip")
def export_everything(request: Request, person: Person = Depends(require_person)) -> Response:
    """Every conversation of the person, one Episode record (JSON) each, with its ratings."""
    data, _ = PersonData(request.app.state.shared.factory, person.id).export_zip()
    stamp = datetime.now().strftime("%Y%m%d")
    headers = {"content-disposition": f'attachment; filename="mascot-{person.username}-{stamp}.zip"'}
    return Response(data, media_type="application/zip", headers=headers)


@router.post("/account/delete", dependencies=[Depends(require_csrf)])
def delete_account(request: Request, password: str = Form(...), person: Person = Depends(require_person)) -> Response:
    """Deletes the account and everything of it, for good; asks for the password first."""
    accounts = accounts_of(request)
    if accounts.authenticate(person.username, password) is None:
        return page(request, "account.html", 422, person=person, conversations=None, error="The password is not right: nothing was deleted.")
    try:
        accounts.delete_person(person.id)
    except AccountError as exc:
        return page(request, "account.html", 422, person=person, conversations=None, error=str(exc))
    request.state.person = None  # the page's header must not show the deleted account as logged in
    response = page(request, "deleted.html")
    clear_login_cookie(request, response)
    return response


# ---------------------------------------------------------------------------- the admin's page


@router.get("/admin", response_class=HTMLResponse)
def admin_page(request: Request, admin: Person = Depends(require_admin), invitation: str = "") -> HTMLResponse:
    return page(request, "admin.html", people=accounts_of(request).usage(), me=admin, invitation=invitation, mode=signup_mode(request))


@router.post("/admin/invitations", dependencies=[Depends(require_csrf)])
def new_invitation(request: Request, admin: Person = Depends(require_admin)) -> HTMLResponse:
    code = accounts_of(request).create_invitation(admin.id)
    return page(request, "admin.html", people=accounts_of(request).usage(), me=admin, invitation=code, mode=signup_mode(request))


ADMIN_ACTIONS = ("make-admin", "make-person", "disable", "enable", "delete")


@router.post("/admin/people/{person_id}/{action}", dependencies=[Depends(require_csrf)])
def admin_action(request: Request, person_id: str, action: str, admin: Person = Depends(require_admin)) -> Response:
    accounts = accounts_of(request)
    if action not in ADMIN_ACTIONS or accounts.person(person_id) is None:
        raise HTTPException(status_code=404, detail="Not Found")
    try:
        if action in ("make-admin", "make-person"):
            accounts.set_role(person_id, action.removeprefix("make-"))
        elif action in ("disable", "enable"):
            accounts.set_disabled(person_id, action == "disable")
        else:
            accounts.delete_person(person_id)
    except AccountError as exc:
        return page(request, "admin.html", 422, people=accounts.usage(), me=admin, invitation="", mode=signup_mode(request), error=str(exc))
    return RedirectResponse("/admin", status_code=303)
