"""The asyncio client (grpc.aio): the same verbs as Client, awaited."""

from __future__ import annotations

import asyncio
import os
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
from ctxd_client._drive import adrive
from ctxd_client._watch import AsyncWatch
from ctxd_client.errors import Unavailable, from_rpc_error

#: Calls one AsyncClient has on the wire at once; the rest wait their turn. Thousands
#: started together (``asyncio.gather``) otherwise overrun the server's streams and end
#: in CANCELLED.
MAX_IN_FLIGHT = 256


class AsyncClient(_Verbs):
    """Like Client, but every verb is a coroutine and ``watch`` an async iterator.

    Create it inside the event loop that uses it; ``await client.close()``
    (or ``async with``). At most ``max_in_flight`` calls are on the wire at
    once; more wait in order (a call's ``timeout`` counts from when it is sent).
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
        max_in_flight: int = MAX_IN_FLIGHT,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight is {max_in_flight}; it must be at least 1")
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
            grpc.aio.secure_channel(target, creds, options)
            if creds
            else grpc.aio.insecure_channel(target, options)
        )
        self._plaintext = creds is None
        self._tokens = TokenSource(token, None if token_file is None else os.fspath(token_file))
        self._timeout = timeout
        self._retry = retry
        self._stub = self._stubs(self._channel)
        self._in_flight = asyncio.Semaphore(max_in_flight)

    @property
    def _metadata(self) -> tuple:
        return self._tokens.metadata()

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _unary(self, call: ops.Call, timeout: float | None) -> Any:
        method = getattr(self._stub[call.service], call.method)
        attempts = self._retry.attempts if call.retry else 1
        for attempt in range(attempts):
            try:
                async with self._in_flight:
                    return await method(call.request, timeout=timeout, metadata=self._metadata)
            except grpc.RpcError as err:
                exc = from_rpc_error(err)
                if isinstance(exc, Unavailable):  # the diagnosis may probe the port
                    exc = await asyncio.to_thread(
                        diagnose, exc, self.address, plaintext=self._plaintext
                    )
                else:
                    exc = diagnose(exc, self.address, plaintext=self._plaintext)
                retry = isinstance(exc, Unavailable) and not isinstance(exc, CannotConnect)
                if not retry or attempt == attempts - 1:
                    raise exc from None
            await asyncio.sleep(self._retry.delay(attempt))
        raise AssertionError("unreachable")

    def _run(self, op: ops.Op, timeout: float | None) -> Any:
        timeout = self._timeout if timeout is None else timeout
        return adrive(op, lambda call: self._unary(call, timeout))

    def watch(self, context_id: str, *, timeout: float | None = None) -> AsyncWatch:
        """Events for a context, from now until cancelled (``cancel()``, or
        leaving a ``with`` block) or ``timeout`` passes (none by default).
        Errors arrive as CtxdError."""
        return AsyncWatch(
            self._stub[ops.CONTEXT].WatchContext(
                pb.WatchContextRequest(context_id=context_id),
                timeout=timeout,
                metadata=self._metadata,
            )
        )
