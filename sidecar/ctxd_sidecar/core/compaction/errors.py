"""Summariser failures a caller can act on (back off, fix the configuration).

Timeouts, refused connections, rate limits and 5xx answers are
:class:`ctxd_sidecar.core.errors.Unavailable` (transient). Everything below is a
:class:`SummariserError`: the summariser answered, but not with something
usable, or refused the request for a reason retrying will not fix soon.
Both count as failures for the automatic trigger's back-off.
"""

from __future__ import annotations

from ctxd_sidecar.core import errors


class SummariserError(errors.FailedPrecondition):
    """The summariser could not produce a summary; ``reason`` classifies why.

    Reasons: ``malformed_answer`` (not JSON of the answer schema nor usable
    text), ``rejected`` (the endpoint refused the request: authentication,
    unknown model, bad parameters), ``window_too_small`` (the summariser's
    window cannot hold even a minimal request).
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class MalformedAnswer(SummariserError):
    """The answer was neither a summary object nor plain text."""

    def __init__(self, message: str) -> None:
        super().__init__("malformed_answer", message)
