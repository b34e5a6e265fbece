"""The blocking client."""

from __future__ import annotations

import os
import time
from typing import Any

import grpc

from ctxd_client import _ops as ops
from ctxd_client._api.ctxd.v1 import context_pb2 as pb
from ctxd_client._base import _Verbs
from ctxd_client._connect import (
    DEFAULT_RETRY,
    DEFAULT_TIMEOUT,
    CannotConnect,
    Retry,
    TokenSource,
    channel_args,
    diagnose,
)
from ctxd_client._drive import drive
from ctxd_client._watch import Watch
from ctxd_client.errors import Unavailable, from_rpc_error


class Client(_Verbs):
    """A connection to one sidecar; thread-safe; close it (or use ``with``).

    ``address`` defaults to $CTXD_ADDRESS, then 127.0.0.1:50051; ``token``
    to the contents of ``token_file`` or $CTXD_TOKEN_FILE (re-read when the
    file changes), then $CTXD_TOKEN. A call that retrying cannot help (a TLS
    mismatch, no gRPC server at the address, UNIMPLEMENTED, UNAUTHENTICATED)
    fails at once with the address and the cause; UNAVAILABLE is retried.
    TLS is on when ``tls`` or any of the certificate arguments (PEM bytes or
    a file path) is given.
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        token: str | None = None,
        tls: bool = False,
        root_ca: bytes | str | os.PathLike | None = None,
        client_cert: bytes | str | os.PathLike | None = None,
        client_key: bytes | str | os.PathLike | None = None,
        server_name: str | None = None,
        token_file: str | os.PathLike | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        retry: Retry = DEFAULT_RETRY,
    ) -> None:
        target, creds, options = channel_args(
            address,
            tls=tls,
            root_ca=root_ca,
            client_cert=client_cert,
            client_key=client_key,
            server_name=server_name,
        )
        self.address = target
        self._channel = (
            grpc.secure_channel(target, creds, options)
            if creds
            else grpc.insecure_channel(target, options)
        )
        self._plaintext = creds is None
        self._tokens = TokenSource(token, None if token_file is None else os.fspath(token_file))
        self._timeout = timeout
        self._retry = retry
        self._stub = self._stubs(self._channel)

    @property
    def _metadata(self) -> tuple:
        return self._tokens.metadata()

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _unary(self, call: ops.Call, timeout: float | None) -> Any:
        method = getattr(self._stub[call.service], call.method)
        attempts = self._retry.attempts if call.retry else 1
        for attempt in range(attempts):
            try:
                return method(call.request, timeout=timeout, metadata=self._metadata)
            except grpc.RpcError as err:
                exc = diagnose(from_rpc_error(err), self.address, plaintext=self._plaintext)
                retry = isinstance(exc, Unavailable) and not isinstance(exc, CannotConnect)
                if not retry or attempt == attempts - 1:
                    raise exc from None
            time.sleep(self._retry.delay(attempt))
        raise AssertionError("unreachable")

    def _run(self, op: ops.Op, timeout: float | None) -> Any:
        timeout = self._timeout if timeout is None else timeout
        return drive(op, lambda call: self._unary(call, timeout))

    def watch(self, context_id: str, *, timeout: float | None = None) -> Watch:
        """Events for a context, from now until cancelled (``cancel()``, or
        leaving a ``with`` block) or ``timeout`` passes (none by default).
        Errors arrive as CtxdError."""
        return Watch(
            self._stub[ops.CONTEXT].WatchContext(
                pb.WatchContextRequest(context_id=context_id),
                timeout=timeout,
                metadata=self._metadata,
            )
        )
