"""User-facing errors: the CLI prints their message as one line and exits non-zero, no traceback."""


class MascotError(Exception):
    """Base for problems the user can fix: a wrong path, a malformed file, an unreachable server."""


def failure_cause(exc: BaseException) -> str:
    """The counted kind of a failure: its `cause` (an LLM client's error says which), otherwise
    the exception's type."""
    return getattr(exc, "cause", None) or type(exc).__name__
