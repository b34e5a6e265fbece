"""Exceptions for each gRPC status, carrying the google.rpc details ctxd sends.

ctxd names the offending field (BadRequest), the cap that was hit (QuotaFailure)
and a machine-readable reason (ErrorInfo); callers branch on those instead of
parsing messages.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status


@dataclass(frozen=True)
class FieldViolation:
    field: str
    description: str


@dataclass(frozen=True)
class QuotaViolation:
    subject: str
    description: str


class CtxdError(Exception):
    """Any error from ctxd or from this client; ``code`` is None for client-side ones."""

    code: grpc.StatusCode | None = None
    #: The address called and what went wrong there, for failures of the
    #: connection rather than of the request (set by the client).
    address: str = ""
    cause: str = ""

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode | None = None,
        details: tuple = (),
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        #: The unpacked google.rpc detail messages (BadRequest, QuotaFailure, ErrorInfo, ...).
        self.details: tuple = details
        self.field_violations: list[FieldViolation] = []
        self.quota_violations: list[QuotaViolation] = []
        self.error_info: error_details_pb2.ErrorInfo | None = None
        for d in details:
            if isinstance(d, error_details_pb2.BadRequest):
                self.field_violations += [
                    FieldViolation(v.field, v.description) for v in d.field_violations
                ]
            elif isinstance(d, error_details_pb2.QuotaFailure):
                self.quota_violations += [
                    QuotaViolation(v.subject, v.description) for v in d.violations
                ]
            elif isinstance(d, error_details_pb2.ErrorInfo):
                self.error_info = d

    @property
    def reason(self) -> str:
        """ErrorInfo.reason, or "" when the sidecar sent none."""
        return self.error_info.reason if self.error_info else ""

    def __str__(self) -> str:
        name = self.code.name if self.code else "CLIENT"
        if self.address:
            return f"{name}: {self.address}: {self.cause} ({self.message})"
        return f"{name}: {self.message}"


class Cancelled(CtxdError):
    code = grpc.StatusCode.CANCELLED


class Unknown(CtxdError):
    code = grpc.StatusCode.UNKNOWN


class InvalidArgument(CtxdError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceeded(CtxdError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFound(CtxdError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(CtxdError):
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(CtxdError):
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(CtxdError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(CtxdError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(CtxdError):
    code = grpc.StatusCode.ABORTED


class OutOfRange(CtxdError):
    code = grpc.StatusCode.OUT_OF_RANGE


class Unimplemented(CtxdError):
    code = grpc.StatusCode.UNIMPLEMENTED


class Internal(CtxdError):
    code = grpc.StatusCode.INTERNAL


class Unavailable(CtxdError):
    code = grpc.StatusCode.UNAVAILABLE


class DataLoss(CtxdError):
    code = grpc.StatusCode.DATA_LOSS


class Unauthenticated(CtxdError):
    code = grpc.StatusCode.UNAUTHENTICATED


_BY_CODE: dict[grpc.StatusCode, type[CtxdError]] = {
    cls.code: cls
    for cls in (
        Cancelled,
        Unknown,
        InvalidArgument,
        DeadlineExceeded,
        NotFound,
        AlreadyExists,
        PermissionDenied,
        ResourceExhausted,
        FailedPrecondition,
        Aborted,
        OutOfRange,
        Unimplemented,
        Internal,
        Unavailable,
        DataLoss,
        Unauthenticated,
    )
}

_DETAIL_TYPES = (
    error_details_pb2.BadRequest,
    error_details_pb2.QuotaFailure,
    error_details_pb2.ErrorInfo,
    error_details_pb2.PreconditionFailure,
    error_details_pb2.RetryInfo,
    error_details_pb2.ResourceInfo,
    error_details_pb2.DebugInfo,
    error_details_pb2.Help,
    error_details_pb2.LocalizedMessage,
)


def _unpack(status) -> tuple:
    out = []
    for any_ in status.details:
        for cls in _DETAIL_TYPES:
            if any_.Is(cls.DESCRIPTOR):
                msg = cls()
                any_.Unpack(msg)
                out.append(msg)
                break
    return tuple(out)


def from_rpc_error(err: grpc.RpcError) -> CtxdError:
    """The CtxdError subclass for a failed call, with its rich details unpacked."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    message = (err.details() if hasattr(err, "details") else None) or str(code)
    details: tuple = ()
    try:
        status = rpc_status.from_call(err)  # type: ignore[arg-type]
    except (ValueError, AttributeError, TypeError):
        status = None
    if status is not None:
        details = _unpack(status)
    cls = _BY_CODE.get(code, CtxdError)
    return cls(message, code=code, details=details)
