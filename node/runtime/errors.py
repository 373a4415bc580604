"""The error a bad admin request raises, shared by the node (which validates commands) and the
admin API (which turns it into a JSON answer), so that neither has to import the other."""

from __future__ import annotations

from ..errors import BadInput


class RequestError(BadInput, ValueError):
    """A bad admin request: `field` names the offending field (None for the request as a whole)."""

    def __init__(self, message: str, field: str | None = None, status: int = 400):
        super().__init__(message)
        self.field = field
        self.status = status
