"""User-facing errors: the CLI prints their message as one line and exits non-zero, no traceback."""


class MascotError(Exception):
    """Base for problems the user can fix: a wrong path, a malformed file, an unreachable server."""


def failure_cause(exc: BaseException) -> str:
    """The counted kind of a failure: its `cause` (an LLM client's error says which), otherwise
    the exception's type."""
    return getattr(exc, "cause", None) or type(exc).__name__


def json_problem(exc: ValueError) -> str:
    """A JSON decoding error as a person finds it: what is wrong `at column C` of a one-line text,
    `at line L, column C` of a longer one (json's own message ends in "at" or names no place)."""
    what = str(getattr(exc, "msg", exc)).removesuffix(" at").removesuffix(":")
    line, column = getattr(exc, "lineno", 1), getattr(exc, "colno", None)
    if column is None:
        return what
    return f"{what} at column {column}" if line == 1 else f"{what} at line {line}, column {column}"


def flag_json_error(flag: str, text: str) -> MascotError:
    """The one-line error for a flag's text that is not JSON: the text is shown on one line (its
    whitespace runs as single spaces), so the place named is the place in that line."""
    import json

    shown = " ".join(text.split())
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        problem = json_problem(exc)
        try:
            json.loads(shown)
        except json.JSONDecodeError as in_shown:
            if in_shown.msg == exc.msg:  # the same mistake, placed in the line shown
                problem = json_problem(in_shown)
        return MascotError(f"{flag} is not valid JSON ({problem}): {shown}")
    return MascotError(f"{flag} is not valid JSON: {shown}")


SERVER_HUNG_UP = "the server closed the connection without answering"


def connection_words(exc: BaseException) -> str | None:
    """A failed connection in words a person reads, found anywhere in the exception's chain (each
    HTTP library wraps the operating system's error its own way); None when the chain holds none."""
    import socket

    seen: BaseException | None = exc
    for _ in range(8):  # the chains are short; a bound guards against a cycle
        if seen is None:
            return None
        if isinstance(seen, ConnectionRefusedError):
            return "connection refused: nothing answers at that address and port"
        if isinstance(seen, socket.gaierror):
            return "the host name is not known (check the URL)"
        if isinstance(seen, (ConnectionResetError, BrokenPipeError)):
            return SERVER_HUNG_UP
        seen = getattr(seen, "os_error", None) or seen.__cause__ or seen.__context__
    return None
