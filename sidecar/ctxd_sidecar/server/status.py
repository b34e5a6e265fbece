"""Map domain errors to gRPC statuses with ``google.rpc`` details."""

from __future__ import annotations

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from ctxd_sidecar.core import errors

DOMAIN = "ctxd.dev"

_CODES: list[tuple[type[errors.CtxdError], int]] = [
    (errors.InvalidArgument, code_pb2.INVALID_ARGUMENT),
    (errors.NotFound, code_pb2.NOT_FOUND),
    (errors.AlreadyExists, code_pb2.ALREADY_EXISTS),
    (errors.Conflict, code_pb2.ABORTED),
    (errors.FailedPrecondition, code_pb2.FAILED_PRECONDITION),
    (errors.OutOfRange, code_pb2.OUT_OF_RANGE),
    (errors.LimitExceeded, code_pb2.RESOURCE_EXHAUSTED),
    (errors.Unavailable, code_pb2.UNAVAILABLE),
    (errors.DataLoss, code_pb2.DATA_LOSS),
]


def _pack(msg) -> any_pb2.Any:
    out = any_pb2.Any()
    out.Pack(msg)
    return out


def to_status(exc: errors.CtxdError) -> grpc.Status:
    code = next((c for cls, c in _CODES if isinstance(exc, cls)), code_pb2.UNKNOWN)
    details = []
    if isinstance(exc, errors.InvalidArgument):
        details.append(
            _pack(
                error_details_pb2.BadRequest(
                    field_violations=[
                        error_details_pb2.BadRequest.FieldViolation(
                            field=exc.field, description=exc.description
                        )
                    ]
                )
            )
        )
    elif isinstance(exc, errors.LimitExceeded):
        details.append(
            _pack(
                error_details_pb2.QuotaFailure(
                    violations=[
                        error_details_pb2.QuotaFailure.Violation(
                            subject=exc.limit, description=exc.message
                        )
                    ]
                )
            )
        )
        details.append(
            _pack(
                error_details_pb2.ErrorInfo(
                    reason="LIMIT_EXCEEDED",
                    domain=DOMAIN,
                    metadata={"limit": exc.limit, "value": str(exc.value)},
                )
            )
        )
    elif isinstance(exc, errors.Unavailable):
        details.append(_pack(error_details_pb2.RetryInfo()))
    reason = getattr(exc, "reason", None)
    if isinstance(reason, str) and reason and not isinstance(exc, errors.LimitExceeded):
        # Typed reasons (a summariser's failure, a refused summary): "EMPTY_SUMMARY".
        details.append(_pack(error_details_pb2.ErrorInfo(reason=reason.upper(), domain=DOMAIN)))
    status = status_pb2.Status(code=code, message=exc.message, details=details)
    return rpc_status.to_status(status)


def internal(reference: str) -> grpc.Status:
    status = status_pb2.Status(
        code=code_pb2.INTERNAL,
        message=f"internal error (reference {reference}); see the sidecar log",
    )
    return rpc_status.to_status(status)
