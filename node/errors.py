"""Errors of local input (configuration, admin request bodies, fault rules) that name their field.

Callers that report where a value lives (a scenario's `config.<key>`, an admin body's field) read
`key` instead of parsing it back out of the message.
"""

from __future__ import annotations


class SettingError(ValueError):
    """A bad value for `key`; str() is "key: message", as it always was."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message
