"""Admission and drain: calls are admitted while serving, refused while
stopping, and streams ended when the server stops."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time

import grpc

from ctxd_sidecar.core.errors import LimitExceeded
from ctxd_sidecar.server import status
from ctxd_sidecar.server.layers.auth import _guarded
from ctxd_sidecar.server.layers.pipeline import _SETTLE, HEALTH_CHECK, STOPPING, _replace


class Gate:
    """Admission and drain. Counts the unary calls in flight so shutdown can
    wait for them itself (``server.stop(grace)`` cancels whatever is left at
    the end of grace); once stopping, refuses new calls with UNAVAILABLE
    (Health.Check still answers NOT_SERVING); caps concurrent streams; and
    ends the open ones with UNAVAILABLE when the server stops."""

    def __init__(self, stream_caps: dict[str, tuple[str, int]] | None = None) -> None:
        #: method -> (setting name, most streams open at once)
        self._caps = stream_caps or {}
        self._open: dict[str, int] = {}
        self.stopping = False
        self.in_flight = 0
        self._admitted = 0.0
        self._streams_end = asyncio.Event()

    def wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        if handler.unary_unary is not None:
            return self._unary(handler, method)
        if handler.unary_stream is not None:
            return self._stream(handler, method)
        return _guarded(handler, self._admits, grpc.StatusCode.UNAVAILABLE, STOPPING)

    def _admits(self, context) -> bool:
        return not self.stopping

    def _unary(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        inner = handler.unary_unary
        always = method == HEALTH_CHECK

        async def unary_unary(request, context):
            # A refused call counts as an arrival too: while calls gRPC queued
            # before the stop are still being dispatched (and refused), the
            # drain must not take the quiet for the end of them.
            self._admitted = time.monotonic()
            if self.stopping and not always:
                await context.abort(grpc.StatusCode.UNAVAILABLE, STOPPING)
            self.in_flight += 1
            try:
                return await inner(request, context)
            finally:
                self.in_flight -= 1

        return _replace(handler, unary_unary)

    def _stream(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        inner = handler.unary_stream
        cap = self._caps.get(method)

        async def unary_stream(request, context):
            if self.stopping:
                await context.abort(grpc.StatusCode.UNAVAILABLE, STOPPING)
            self._admitted = time.monotonic()
            if cap is not None and self._open.get(method, 0) >= cap[1]:
                name, most = cap
                st = status.to_status(
                    LimitExceeded(name, most, f"{most} streams of this method are open; {name}")
                )
                await context.abort(st.code, st.details, st.trailing_metadata)
            self._open[method] = self._open.get(method, 0) + 1
            pump = asyncio.ensure_future(_pump(inner, request, context))
            end = asyncio.ensure_future(self._streams_end.wait())
            try:
                await asyncio.wait({pump, end}, return_when=asyncio.FIRST_COMPLETED)
                if pump.done():
                    return pump.result()
            finally:
                end.cancel()
                if not pump.done():
                    pump.cancel()
                    with contextlib.suppress(asyncio.CancelledError, grpc.aio.AbortError):
                        await pump
                self._open[method] -= 1
            await context.abort(grpc.StatusCode.UNAVAILABLE, STOPPING)

        return _replace(handler, unary_stream)

    def alone(self) -> bool:
        """Whether the calling unary call is the only work the event loop has:
        no other call in flight and nothing else ready to run.

        A call gRPC has received is only counted once its handler starts, so
        a handler that never yields would keep seeing itself alone while
        others queue behind it; their dispatch shows first as callbacks ready
        on the loop, which asyncio keeps in ``_ready`` (no public API tells).
        A loop without it (another implementation) is never taken as idle.
        """
        return self.in_flight <= 1 and not getattr(asyncio.get_running_loop(), "_ready", True)

    def open_streams(self, method: str) -> int:
        return self._open.get(method, 0)

    def begin_stop(self) -> None:
        """Refuse new calls from now on."""
        self.stopping = True

    def end_streams(self) -> None:
        """End every open stream with UNAVAILABLE."""
        self._streams_end.set()

    async def drain(self, timeout: float) -> int:
        """Wait until no unary call is in flight and none has arrived for
        ``_SETTLE``, at most ``timeout`` seconds; return how many are still
        running.

        gRPC hands received calls to their handlers one after another and
        cancels those not yet handed over when the server stops; the quiet
        spell is what tells that its queue has emptied (each queued call
        arrives, is refused UNAVAILABLE, and restarts the spell).
        """
        deadline = time.monotonic() + timeout
        while True:
            now = time.monotonic()
            if self.in_flight == 0 and now - self._admitted >= _SETTLE:
                return 0
            if now >= deadline:
                return self.in_flight
            await asyncio.sleep(min(0.01, deadline - now))


async def _pump(inner, request, context) -> None:
    """Run a server-streaming behaviour as a coroutine (generators write through
    ``context.write``), so the gate can end it from outside."""
    if not inspect.isasyncgenfunction(inner):
        await inner(request, context)
        return
    async with contextlib.aclosing(inner(request, context)) as items:
        async for item in items:
            await context.write(item)
