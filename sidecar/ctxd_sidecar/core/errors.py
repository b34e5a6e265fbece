"""Domain errors: what went wrong in terms a caller can act on.

The gRPC layer maps each class to a status code (see
:mod:`ctxd_sidecar.server.status`); nothing here knows about gRPC. Messages are
shown to callers, so they never carry paths, credentials or internals.
"""

from __future__ import annotations


class CtxdError(Exception):
    """Base of errors that are the caller's to handle."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(CtxdError):
    """A request field is malformed. ``field`` names it (dotted path)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.description = message


class NotFound(CtxdError):
    """The named context, key or item does not exist."""


class AlreadyExists(CtxdError):
    """Something that must be new already exists."""


class Conflict(CtxdError):
    """A version precondition failed (expected_version, stale plan, lost race)."""


class FailedPrecondition(CtxdError):
    """The operation does not apply in the current state."""


class OutOfRange(CtxdError):
    """A position past the end of what exists (a version after the latest)."""


class LimitExceeded(CtxdError):
    """A configured cap would be exceeded. ``limit`` names it, ``value`` is its size."""

    def __init__(self, limit: str, value: int, message: str) -> None:
        super().__init__(message)
        self.limit = limit
        self.value = value


class Unavailable(CtxdError):
    """A dependency (store, summariser) is down or too slow; retry later."""


class DataLoss(CtxdError):
    """Stored data does not match what ctxd recorded of it (a hash); it is
    not served."""

    reason = "ARCHIVE_MISMATCH"
