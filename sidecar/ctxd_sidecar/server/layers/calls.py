"""Statuses, RPC metrics, traces and the access log of every call."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
import uuid

import grpc

from ctxd_sidecar.core.errors import CtxdError
from ctxd_sidecar.server import metrics, status
from ctxd_sidecar.server.layers.pipeline import _is_stream_reply, _replace

log = logging.getLogger(__name__)
access_log = logging.getLogger("ctxd.access")
_CALL: contextvars.ContextVar[_Call] = contextvars.ContextVar("ctxd_call")


class Calls:
    """The outermost layer, so refusals (auth, stopping) are counted too. For
    ctxd's own methods, domain errors become statuses with ``google.rpc``
    details and anything unexpected becomes INTERNAL with a log reference
    (never a stack trace); every unary or server-streaming call is counted,
    timed, traced when tracing is on, and given one access line."""

    def __init__(self, access_level: int | None = logging.INFO, tracing=None) -> None:
        self._access = access_level
        #: Spans per RPC (ctxd_sidecar.server.tracing), when tracing is configured.
        self._tracing = tracing

    def wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        if handler.unary_unary is None and handler.unary_stream is None:
            return handler
        return _observed(handler, _Method(method, self._access, self._tracing))


class _Method:
    """What every call of one method shares: its names, its OK series (looked
    up once, not per call), where its access line goes."""

    __slots__ = ("method", "service", "name", "access", "tracing", "ok_count", "ok_latency")

    def __init__(self, method: str, access: int | None, tracing) -> None:
        self.method = method
        self.service, _, self.name = method.lstrip("/").rpartition("/")
        self.access = access
        self.tracing = tracing
        self.ok_count = metrics.RPC_REQUESTS.labels(self.service, self.name, "OK")
        self.ok_latency = metrics.RPC_LATENCY.labels(self.service, self.name, "OK")


class _Call:
    """One call's figures for metrics, the trace and the access line (never payloads)."""

    __slots__ = ("of", "started", "context_id", "span")

    def __init__(self, of: _Method) -> None:
        self.of = of
        self.started = time.perf_counter()
        self.context_id = ""
        self.span = of.tracing.start_rpc(of.service, of.name) if of.tracing is not None else None

    def done(self, code: str) -> None:
        of = self.of
        elapsed = time.perf_counter() - self.started
        if self.span is not None:
            of.tracing.end_rpc(*self.span, code, self.context_id)
            self.span = None
        if code == "OK":
            of.ok_count.inc()
            of.ok_latency.observe(elapsed)
        else:
            metrics.RPC_REQUESTS.labels(of.service, of.name, code).inc()
            metrics.RPC_LATENCY.labels(of.service, of.name, code).observe(elapsed)
        if of.access is not None and access_log.isEnabledFor(of.access):
            extra = {
                "service": of.service,
                "method": of.name,
                "code": code,
                "duration_ms": round(elapsed * 1000, 3),
            }
            if self.context_id:
                extra["context_id"] = self.context_id
            access_log.log(of.access, "rpc", extra=extra)


async def _fail(exc: Exception, method: str, context: grpc.aio.ServicerContext) -> None:
    if isinstance(exc, NotImplementedError):
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{method} is not implemented")
    st = status.to_status(exc) if isinstance(exc, CtxdError) else None
    if st is None:
        ref = uuid.uuid4().hex[:12]
        log.error("unhandled error", exc_info=exc, extra={"method": method, "reference": ref})
        st = status.internal(ref)
    await context.abort(st.code, st.details, st.trailing_metadata)


async def _ended(
    record: _Call, exc: BaseException, method: str, context: grpc.aio.ServicerContext
) -> None:
    """Record how a call that raised ``exc`` ended: an abort with its code, a
    cancellation as CANCELLED; any other error becomes a status (this aborts)."""
    if isinstance(exc, grpc.aio.AbortError):
        record.done(_code_of(context))
    elif isinstance(exc, asyncio.CancelledError | GeneratorExit):
        record.done("CANCELLED")
    else:
        try:
            await _fail(exc, method, context)
        finally:
            record.done(_code_of(context))


def _code_of(context: grpc.aio.ServicerContext) -> str:
    code = context.code()
    if code is None:
        return "OK"
    return code.name if isinstance(code, grpc.StatusCode) else grpc.StatusCode(code).name


def _observed(handler: grpc.RpcMethodHandler, of: _Method) -> grpc.RpcMethodHandler:
    inner = handler.unary_unary or handler.unary_stream
    method = of.method

    if not _is_stream_reply(inner):
        # Unary calls, and streams that write through context.write (the gate's,
        # grpc's Health.Watch).

        async def call(request, context):
            record = _Call(of)
            _CALL.set(record)
            try:
                reply = await inner(request, context)
            except (asyncio.CancelledError, Exception) as exc:
                await _ended(record, exc, method, context)
                raise
            record.done("OK")
            return reply

        return _replace(handler, call)

    async def stream(request, context):
        record = _Call(of)
        _CALL.set(record)
        try:
            async for item in inner(request, context):
                yield item
        except (asyncio.CancelledError, GeneratorExit, Exception) as exc:
            await _ended(record, exc, method, context)
            raise
        record.done("OK")

    return _replace(handler, stream)
