"""Password hashes: Argon2id through argon2-cffi, with its default cost (RFC 9106's second
recommendation); a hash made with older parameters is renewed at the next login."""

from __future__ import annotations

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

MIN_LENGTH = 10
MAX_LENGTH = 256  # hashing is deliberately slow: an unbounded password is a cheap denial of service
_HASHER = PasswordHasher()


def password_problem(password: str) -> str | None:
    """Why a new password cannot be used (None: it can)."""
    if len(password) < MIN_LENGTH:
        return f"A password needs at least {MIN_LENGTH} characters."
    if len(password) > MAX_LENGTH:
        return f"A password has at most {MAX_LENGTH} characters."
    return None


def hash_password(password: str) -> str:
    return _HASHER.hash(password)


def verify_password(stored: str, password: str) -> bool:
    if len(password) > MAX_LENGTH:
        return False
    try:
        return _HASHER.verify(stored, password)
    except (VerificationError, InvalidHashError):
        return False


def needs_rehash(stored: str) -> bool:
    return _HASHER.check_needs_rehash(stored)


# A hash to verify against when a username is unknown, so that a login takes as long either way.
DUMMY_HASH = _HASHER.hash("not a password of anyone")
