"""Python client for the ctxd sidecar (ctxd.v1 ContextService and MemoryService).

``Client`` blocks, ``AsyncClient`` awaits; both have the same verbs. Errors
are ``CtxdError`` subclasses per gRPC status, with the google.rpc details.
"""

from ctxd_client._api.ctxd.v1 import context_pb2, memory_pb2
from ctxd_client._connect import CannotConnect, Retry
from ctxd_client._ops import SliceDelta, SliceMessages, Turn, Version, to_dict, to_pb
from ctxd_client._watch import AsyncWatch, Watch
from ctxd_client.aio import AsyncClient
from ctxd_client.client import Client
from ctxd_client.errors import (
    Aborted,
    AlreadyExists,
    Cancelled,
    CtxdError,
    DataLoss,
    DeadlineExceeded,
    FailedPrecondition,
    FieldViolation,
    Internal,
    InvalidArgument,
    NotFound,
    OutOfRange,
    PermissionDenied,
    QuotaViolation,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    Unimplemented,
    Unknown,
    from_rpc_error,
)

__version__ = "0.1.0"

__all__ = [
    "Aborted",
    "CannotConnect",
    "AlreadyExists",
    "AsyncClient",
    "AsyncWatch",
    "Cancelled",
    "Client",
    "CtxdError",
    "DataLoss",
    "DeadlineExceeded",
    "FailedPrecondition",
    "FieldViolation",
    "Internal",
    "InvalidArgument",
    "NotFound",
    "OutOfRange",
    "PermissionDenied",
    "QuotaViolation",
    "ResourceExhausted",
    "Retry",
    "SliceDelta",
    "SliceMessages",
    "Turn",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "Unknown",
    "Version",
    "Watch",
    "context_pb2",
    "from_rpc_error",
    "memory_pb2",
    "to_dict",
    "to_pb",
]
