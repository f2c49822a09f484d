"""User-facing errors: one family, each with the protocol's error code (docs/protocol.md, "Error codes").

Services raise them; the socket consumer turns them into `error` events and the API into JSON error bodies.
"""

from __future__ import annotations

from typing import Any


class ApplicationError(Exception):
    """A request refused with a reason the user may read; nothing was changed or queued."""

    code = "error"

    def __init__(self, message: str, *, field: str | None = None, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.retry_after = retry_after

    def as_event(self) -> dict[str, Any]:
        """The protocol's `error` event for this error."""
        event: dict[str, Any] = {"type": "error", "code": self.code, "message": self.message}
        if self.field is not None:
            event["field"] = self.field
        if self.retry_after is not None:
            event["retry_after"] = self.retry_after
        return event


class BadJson(ApplicationError):
    code = "bad_json"


class BadType(ApplicationError):
    code = "bad_type"


class BadField(ApplicationError):
    code = "bad_field"


class TooLong(ApplicationError):
    code = "too_long"


class NotFound(ApplicationError):
    code = "not_found"

    def __init__(self, what: str = "conversation", *, field: str | None = None) -> None:
        super().__init__(f"{what} not found", field=field)


class Busy(ApplicationError):
    code = "busy"


class ContextTooLong(ApplicationError):
    code = "context"


class NoWorker(ApplicationError):
    code = "no_worker"
