"""The one exception type for problems a user can fix (bad values, data, requests).

The CLI prints these as a single red line and exits non-zero; everything else is a bug
and shows a traceback only with --verbose.
"""

from __future__ import annotations


class EctlError(Exception):
    """A user-facing error: say what is wrong, where, and how to fix it."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None, exit_code: int | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        if exit_code is not None:
            self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} ({self.hint})"


class ValidationError(EctlError):
    """Values, config or data failed validation; `problems` lists every `path: message`."""

    exit_code = 2

    def __init__(self, message: str, problems: list[str] | None = None, **kw):
        super().__init__(message, **kw)
        self.problems = problems or []
