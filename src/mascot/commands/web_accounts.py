"""The operator's commands of `mascot web --accounts`:

    mascot web users create alice --admin      # the first admin (password asked twice, or one line on stdin)
    mascot web users list                      # accounts and their counts
    mascot web users invite --count 5          # single-use sign-up codes
    mascot web import --username alice         # the single-person app's session files into an account

Each works on the same database as the app (`--database-url`, default mascot.db in --session-dir).
"""

from __future__ import annotations

import getpass
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from mascot.dialogue.chat_settings import DEFAULT_SESSION_DIR
from mascot.errors import MascotError
from mascot.settings import default_for, require, setting
from mascot.web.settings import WebSettings


@dataclass
class DatabaseFields:
    session_dir: Path = default_for(
        WebSettings, "session_dir", DEFAULT_SESSION_DIR, help="The app's session folder (its mascot.db is the default database)."
    )
    database_url: Optional[str] = default_for(WebSettings, "database_url", None, help="The accounts database (as `mascot web --database-url`).")

    @property
    def database(self) -> str:
        from mascot.web.accounts.database import default_url

        return self.database_url or default_url(self.session_dir)


@dataclass
class CreateUserSettings(DatabaseFields):
    """Create an account (with --admin, one that manages the others): the password is asked twice, or read as one line from stdin."""

    username: str = setting(None, "The new account's username.", argument=True, required=True)
    admin: bool = setting(False, "Make the account an admin (sees accounts and counts, never conversations).")


@dataclass
class ListUsersSettings(DatabaseFields):
    """List the accounts with their counts (conversations and turns; never what they say)."""


@dataclass
class InviteSettings(DatabaseFields):
    """Make single-use sign-up codes for `mascot web --accounts --signup invite`."""

    count: int = setting(1, "How many codes.")

    def __post_init__(self) -> None:
        require(1 <= self.count <= 1000, "--count must be between 1 and 1000")


@dataclass
class ImportSettings(DatabaseFields):
    """Move the single-person app's saved sessions (session-*.jsonl in --from, with their ratings) into one account."""

    username: str = setting(None, "The account that receives them.", required=True)
    source: Path = setting(DEFAULT_SESSION_DIR, "The folder of session files to import.", flags=("--from",))


def read_password() -> str:
    """The new password: asked twice at a terminal, else the first line of stdin."""
    if not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\n")
    first = getpass.getpass("Password: ")
    if getpass.getpass("Again: ") != first:
        raise MascotError("the two passwords differ: nothing was created")
    return first


def accounts_at(settings: DatabaseFields):
    from mascot.web.accounts.database import open_database
    from mascot.web.accounts.repository import Accounts

    _, factory = open_database(settings.database)
    return Accounts(factory)


def run_create(settings: CreateUserSettings) -> None:
    import typer

    from mascot.web.accounts.repository import AccountError

    accounts = accounts_at(settings)
    try:
        person = accounts.create_person(settings.username, read_password(), role="admin" if settings.admin else "person")
    except AccountError as exc:
        raise MascotError(f"no account created: {exc}") from None
    typer.secho(f"created {person.role} account {person.username!r} (1 account; {accounts.count_people()} in the database)", fg="green")


def run_list(settings: ListUsersSettings) -> None:
    from rich.console import Console
    from rich.table import Table

    usage = accounts_at(settings).usage()
    table = Table("username", "role", "since", "last login", "conversations", "turns")
    for u in usage:
        last = u.last_seen_at.strftime("%Y-%m-%d") if u.last_seen_at else "never"
        table.add_row(
            u.username + (" (disabled)" if u.disabled else ""), u.role, u.created_at.strftime("%Y-%m-%d"), last, str(u.conversations), str(u.turns)
        )
    Console().print(table)
    print(f"{len(usage)} accounts")


def run_invite(settings: InviteSettings) -> None:
    accounts = accounts_at(settings)
    codes = [accounts.create_invitation() for _ in range(settings.count)]
    print("\n".join(codes))
    print(f"{len(codes)} invitation codes (each lets one person sign up; shown only now)", file=sys.stderr)


def run_import(settings: ImportSettings) -> None:
    import typer

    from mascot.web.accounts.importing import import_sessions

    accounts = accounts_at(settings)
    person = accounts.by_username(settings.username)
    if person is None:
        raise MascotError(f"no account {settings.username!r}: create it first (`mascot web users create {settings.username}`)")
    counts = import_sessions(accounts.factory, person.id, Path(settings.source))
    typer.echo(f"imported {counts.imported} sessions ({counts.turns} turns, {counts.ratings} ratings) into {person.username!r}; "
               f"{counts.already} already there, {counts.unreadable} unreadable (skipped, logged)")  # fmt: skip
    if counts.imported == 0:
        raise MascotError(
            f"nothing imported from {settings.source}" + (f": all {counts.already} sessions are in the database already" if counts.already else "")
        )


def dry_run_accounts(command: str, settings: DatabaseFields) -> None:
    """Checks the database URL (and, for an import, the folder and the files in it) and prints the
    settings; opens, migrates and writes nothing."""
    from mascot.commands.dryrun import print_settings
    from mascot.settings import as_dict
    from mascot.web.accounts.database import make_engine, redacted

    make_engine(settings.database).dispose()  # a URL that names no database is one line; nothing connects
    values = {**as_dict(settings), "database": redacted(settings.database)}
    values.pop("database_url", None)
    if isinstance(settings, ImportSettings):
        if not Path(settings.source).is_dir():
            raise MascotError(f"--from {settings.source}: no such folder")
        values["session_files"] = len(list(Path(settings.source).glob("session-*.jsonl")))
    print_settings(command, values)
