"""Turns the app into a many-person service (`mascot web --accounts`): the database opened and
migrated, the account pages added, every chat route behind the login check, and the hourly
housekeeping (retention, expired logins, old rate-limit events)."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from fastapi import Depends, FastAPI

from mascot.web.accounts import limits
from mascot.web.accounts.auth import LoginRequired, logged_in, login_redirect, require_person
from mascot.web.accounts.database import open_database, redacted
from mascot.web.accounts.repository import Accounts, delete_older_than
from mascot.web.accounts.routes import router as account_router
from mascot.web.accounts.store import Shared

if TYPE_CHECKING:
    from mascot.web.settings import WebSettings

log = logging.getLogger(__name__)
HOUSEKEEPING_S = 3600
LIMIT_WINDOW_S = 86400  # counted events older than a day are past every limit's window


def install_accounts(app: FastAPI, settings: WebSettings, chat_router) -> None:
    engine, factory = open_database(settings.database)
    app.state.database = engine
    app.state.accounts = Accounts(factory)
    app.state.shared = Shared(factory, settings, {}, message_limit=limits.Limit(settings.message_limit, 60))
    app.include_router(account_router)
    app.include_router(chat_router, dependencies=[Depends(require_person)])
    app.add_exception_handler(LoginRequired, login_redirect)
    app.state.templates.env.globals["current_person"] = logged_in
    log.info("accounts database: %s", redacted(settings.database))


def use_clients(app: FastAPI, clients: dict, identities=None) -> None:
    app.state.shared.clients = clients
    app.state.shared.identities = identities


def housekeeping(app: FastAPI) -> dict[str, int]:
    """One round: conversations past the retention period, expired logins and old counted events
    removed; the counts are logged and returned."""
    settings, shared = app.state.settings, app.state.shared
    done = {"conversations": delete_older_than(shared.factory, settings.retain_days) if settings.retain_days else 0,
            "logins": app.state.accounts.forget_expired_logins(), "rate_events": limits.forget_old(shared.factory, LIMIT_WINDOW_S)}  # fmt: skip
    if settings.retain_days:
        log.warning("retention (%s days): %d conversations deleted", settings.retain_days, done["conversations"])
    return done


async def keep_house(app: FastAPI) -> None:
    while True:
        try:
            await asyncio.to_thread(housekeeping, app)
        except Exception:
            log.exception("housekeeping of the accounts database failed; trying again in an hour")
        await asyncio.sleep(HOUSEKEEPING_S)
