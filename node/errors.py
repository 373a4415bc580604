"""The roots of every splitbrain error, and errors of local input that name their field.

`BadInput` is input that cannot be used (a scenario field, a setting, a file, a frame, a request
body): the command line exits 2 on it. `RunFailed` is a run, a tool or a backend that could not
go on: the command line exits 1. Every error class of the packages derives from one of them (and
keeps its older base, ValueError or RuntimeError, so existing `except` clauses still catch it), so
a caller maps an error to its exit code by its root instead of class by class. They live in node/,
the package every other one may import.

Callers that report where a value lives (a scenario's `config.<key>`, an admin body's field) read
`key` instead of parsing it back out of the message.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2


class BadInput(Exception):
    """Input that cannot be used; the command line exits 2 and prints the message."""


class RunFailed(Exception):
    """A run, a tool or a backend that could not go on; the command line exits 1."""


def exit_code(exc: BaseException) -> int | None:
    """The command-line exit code of an error by its root, or None for one under neither (a bug)."""
    if isinstance(exc, BadInput):
        return EXIT_BAD_INPUT
    if isinstance(exc, RunFailed):
        return EXIT_FAILED
    return None


class SettingError(BadInput, ValueError):
    """A bad value for `key`; str() is "key: message", as it always was."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message
