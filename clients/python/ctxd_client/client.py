"""The blocking client."""

from __future__ import annotations

import time
from typing import Any

import grpc

from ctxd_client._base import _BaseClient
from ctxd_client._connect import diagnose
from ctxd_client._drive import drive
from ctxd_client._ops import Call
from ctxd_client._watch import Watch
from ctxd_client.errors import from_rpc_error


class Client(_BaseClient):
    """A connection to one sidecar; thread-safe; close it (or use ``with``).

    ``address`` defaults to $CTXD_ADDRESS, then 127.0.0.1:50051; ``token``
    to the contents of ``token_file`` or $CTXD_TOKEN_FILE (re-read when the
    file changes), then $CTXD_TOKEN. A call that retrying cannot help (a TLS
    mismatch, no gRPC server at the address, UNIMPLEMENTED, UNAUTHENTICATED)
    fails at once with the address and the cause; UNAVAILABLE is retried.
    TLS is on when ``tls`` or any of the certificate arguments (PEM bytes or
    a file path) is given.
    """

    _grpc = grpc
    _drive = staticmethod(drive)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _unary(self, call: Call, timeout: float | None) -> Any:
        method = self._method(call)
        for attempt in self._attempts(call):
            try:
                return method(call.request, timeout=timeout, metadata=self._metadata)
            except grpc.RpcError as err:
                exc = diagnose(from_rpc_error(err), self.address, plaintext=self._plaintext)
                self._raise_unless_retried(exc, attempt, call)
            time.sleep(self._retry.delay(attempt))
        raise AssertionError("unreachable")

    def watch(self, context_id: str, *, timeout: float | None = None) -> Watch:
        """Events for a context, from now until cancelled (``cancel()``, or
        leaving a ``with`` block) or ``timeout`` passes (none by default).
        Errors arrive as CtxdError."""
        return Watch(self._watch_stream(context_id, timeout))
