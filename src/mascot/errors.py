"""User-facing errors: the CLI prints their message as one line and exits non-zero, no traceback."""


class MascotError(Exception):
    """Base for problems the user can fix: a wrong path, a malformed file, an unreachable server."""
