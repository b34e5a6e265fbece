"""The asyncio client (grpc.aio): the same verbs as Client, awaited."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import grpc

from ctxd_client._base import _BaseClient
from ctxd_client._connect import DEFAULT_RETRY, DEFAULT_TIMEOUT, Retry, diagnose
from ctxd_client._drive import adrive
from ctxd_client._ops import Call
from ctxd_client._watch import AsyncWatch
from ctxd_client.errors import CtxdError, Unavailable, from_rpc_error

#: Calls one AsyncClient has on the wire at once; the rest wait their turn. Thousands
#: started together (``asyncio.gather``) otherwise overrun the server's streams and end
#: in CANCELLED.
MAX_IN_FLIGHT = 256


class AsyncClient(_BaseClient):
    """Like Client, but every verb is a coroutine and ``watch`` an async iterator.

    Create it inside the event loop that uses it; ``await client.close()``
    (or ``async with``). At most ``max_in_flight`` calls are on the wire at
    once; more wait in order (a call's ``timeout`` counts from when it is sent).
    """

    _grpc = grpc.aio
    _drive = staticmethod(adrive)

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
        super().__init__(
            address,
            token=token,
            tls=tls,
            root_ca=root_ca,
            client_cert=client_cert,
            client_key=client_key,
            server_name=server_name,
            token_file=token_file,
            timeout=timeout,
            retry=retry,
        )
        self._in_flight = asyncio.Semaphore(max_in_flight)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _unary(self, call: Call, timeout: float | None) -> Any:
        method = self._method(call)
        for attempt in self._attempts(call):
            try:
                async with self._in_flight:
                    return await method(call.request, timeout=timeout, metadata=self._metadata)
            except grpc.RpcError as err:
                self._raise_unless_retried(await self._diagnose(err), attempt, call)
            await asyncio.sleep(self._retry.delay(attempt))
        raise AssertionError("unreachable")

    async def _diagnose(self, err: grpc.RpcError) -> CtxdError:
        exc = from_rpc_error(err)
        if isinstance(exc, Unavailable):  # the diagnosis may probe the port
            return await asyncio.to_thread(diagnose, exc, self.address, plaintext=self._plaintext)
        return diagnose(exc, self.address, plaintext=self._plaintext)

    def watch(self, context_id: str, *, timeout: float | None = None) -> AsyncWatch:
        """As :meth:`Client.watch`, iterated with ``async for`` (and closed by
        ``cancel()`` or leaving an ``async with`` block)."""
        return AsyncWatch(self._watch_stream(context_id, timeout))
