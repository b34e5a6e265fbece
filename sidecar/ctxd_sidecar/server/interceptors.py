"""Cross-cutting concerns applied to every RPC: authentication, admission and
drain, request decoding, error mapping, RPC metrics, traces and the access log.

They are interceptors in the gRPC sense but are applied once per method, when
its handler is registered (:class:`Pipeline`, :class:`Registrar`), not on
every call: ``grpc.aio``'s interceptor chain runs a coroutine per interceptor
for each call before the handler is even found, which is a measurable share
of a sub-millisecond RPC. Each layer wraps a handler and returns a handler,
so a call runs exactly the wrappers of its method and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hmac
import inspect
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

import grpc
from google.protobuf.message import DecodeError

from ctxd_sidecar import metrics
from ctxd_sidecar.core.errors import CtxdError, InvalidArgument, LimitExceeded
from ctxd_sidecar.server import status

log = logging.getLogger(__name__)
access_log = logging.getLogger("ctxd.access")

#: Methods reachable without a token (probes must work before auth is set up).
UNAUTHENTICATED_PREFIXES = ("/grpc.health.v1.Health/",)
HEALTH_CHECK = "/grpc.health.v1.Health/Check"
WATCH_CONTEXT = "/ctxd.v1.ContextService/WatchContext"
HEALTH_WATCH = "/grpc.health.v1.Health/Watch"
#: What a call that arrives, or a stream still open, while stopping is told.
STOPPING = "server is stopping"
#: Seconds without a new admission before the drain trusts an in-flight count of zero
#: (a call admitted just before the stop may not have reached its handler yet).
_SETTLE = 0.05
_KINDS = ("unary_unary", "unary_stream", "stream_unary", "stream_stream")
_MAKERS = {
    "unary_unary": grpc.unary_unary_rpc_method_handler,
    "unary_stream": grpc.unary_stream_rpc_method_handler,
    "stream_unary": grpc.stream_unary_rpc_method_handler,
    "stream_stream": grpc.stream_stream_rpc_method_handler,
}


class Layer(Protocol):
    def wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        """The handler to register for ``method`` in place of ``handler``."""


def _kind(handler: grpc.RpcMethodHandler) -> str:
    return next(k for k in _KINDS if getattr(handler, k) is not None)


def _replace(handler: grpc.RpcMethodHandler, behaviour, **serializers) -> grpc.RpcMethodHandler:
    """``handler`` with a new behaviour of the same kind (and its serializers
    unless given)."""
    kind = _kind(handler)
    return _MAKERS[kind](
        behaviour,
        request_deserializer=serializers.get("request_deserializer", handler.request_deserializer),
        response_serializer=serializers.get("response_serializer", handler.response_serializer),
    )


def _is_stream_reply(behaviour) -> bool:
    return inspect.isasyncgenfunction(behaviour)


class Pipeline:
    """Layers, outermost first, applied to each handler once."""

    def __init__(self, layers: Sequence[Layer]) -> None:
        self.layers = tuple(layers)

    def wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        for layer in reversed(self.layers):
            handler = layer.wrap(handler, method)
        return handler


class _WrappedGeneric(grpc.GenericRpcHandler):
    """A generic handler whose handlers come out of the pipeline (once per method)."""

    def __init__(self, inner: grpc.GenericRpcHandler, pipeline: Pipeline) -> None:
        self._inner = inner
        self._pipeline = pipeline
        self._cache: dict[str, grpc.RpcMethodHandler] = {}

    def service(self, handler_call_details):
        method = handler_call_details.method
        wrapped = self._cache.get(method)
        if wrapped is None:
            handler = self._inner.service(handler_call_details)
            if handler is None:
                return None
            wrapped = self._cache[method] = self._pipeline.wrap(handler, method)
        return wrapped


class Registrar:
    """What services are registered through: the server's two registration
    calls, with every handler passed through the pipeline. Generated
    ``add_*_to_server`` functions, health and reflection take it as their server.

    Handlers reach the server as generic handlers only. ``grpc.aio`` also
    offers per-method registration, but with ctxd's forty-odd methods
    registered that way every call costs 40-70 us more server CPU (grpcio
    1.85, loopback, 1 to 16 callers), while the generic path finds the same
    wrapped handler with one dict lookup."""

    def __init__(self, server: grpc.aio.Server, pipeline: Pipeline) -> None:
        self.server = server
        self.pipeline = pipeline

    def add_generic_rpc_handlers(self, generic_handlers: Iterable[grpc.GenericRpcHandler]) -> None:
        self.server.add_generic_rpc_handlers(
            tuple(_WrappedGeneric(h, self.pipeline) for h in generic_handlers)
        )

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        """Ignored: whoever registers a service this way (generated code,
        health, reflection) also registers it generically, and that is used."""


# -- authentication ---------------------------------------------------------------------
class Auth:
    """Requires ``authorization: Bearer <token>`` on every call but health, before
    the request is read. The scheme's case does not matter (RFC 9110 §11.1);
    the token comparison is constant-time; the token never appears in logs
    or errors."""

    def __init__(self, token: str) -> None:
        self._expected = token.encode()

    def _allowed(self, context: grpc.aio.ServicerContext) -> bool:
        presented = b""
        for key, value in context.invocation_metadata() or ():
            if key == "authorization":
                presented = value.encode() if isinstance(value, str) else value
                break
        scheme, _, token = presented.partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(token, self._expected)

    def wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        if method.startswith(UNAUTHENTICATED_PREFIXES):
            return handler
        return _guarded(
            handler,
            self._allowed,
            grpc.StatusCode.UNAUTHENTICATED,
            "missing or invalid bearer token",
        )


def _guarded(handler, allowed: Callable, code: grpc.StatusCode, message: str):
    """``handler`` refusing with ``code`` whenever ``allowed(context)`` is false."""
    inner = getattr(handler, _kind(handler))
    if _is_stream_reply(inner):

        async def stream(request_or_iterator, context):
            if not allowed(context):
                await context.abort(code, message)
            async for item in inner(request_or_iterator, context):
                yield item

        return _replace(handler, stream)

    async def call(request_or_iterator, context):
        if not allowed(context):
            await context.abort(code, message)
        return await inner(request_or_iterator, context)

    return _replace(handler, call)


# -- admission and drain ----------------------------------------------------------------
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
            if self.stopping and not always:
                await context.abort(grpc.StatusCode.UNAVAILABLE, STOPPING)
            self._admitted = time.monotonic()
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
        """Wait until no unary call is in flight, at most ``timeout`` seconds;
        return how many are still running."""
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


# -- request decoding -------------------------------------------------------------------
class Decode:
    """ctxd's own requests are parsed here rather than in gRPC, innermost (after
    the token and the gate), so bytes that are not the method's message get
    INVALID_ARGUMENT instead of a framework error, and the call's record learns
    its ``context_id``. Other services keep gRPC's own decoding."""

    def wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        decode = handler.request_deserializer
        if not method.startswith("/ctxd.") or decode is None:
            return handler
        # Looked up once per method: asking a message without the field costs
        # an AttributeError on every call.
        tagged = _names_context(decode)
        inner = getattr(handler, _kind(handler))
        if _is_stream_reply(inner):

            async def stream(raw, context):
                async for item in inner(_decode(decode, raw, tagged), context):
                    yield item

            return _replace(handler, stream, request_deserializer=None)

        async def call(raw, context):
            return await inner(_decode(decode, raw, tagged), context)

        return _replace(handler, call, request_deserializer=None)


def _names_context(decode) -> bool:
    """Whether the requests ``decode`` makes have a ``context_id`` field
    (true when that cannot be told, e.g. a deserializer that is no
    message class's ``FromString``)."""
    descriptor = getattr(getattr(decode, "__self__", None), "DESCRIPTOR", None)
    fields = getattr(descriptor, "fields_by_name", None)
    return fields is None or "context_id" in fields


def _decode(decode, raw: bytes, tagged: bool):
    try:
        request = decode(raw)
    except DecodeError:
        raise InvalidArgument(
            "request", "is not a valid protobuf message for this method"
        ) from None
    if tagged:
        context_id = getattr(request, "context_id", None)
        if context_id:
            record = _CALL.get(None)
            if record is not None:
                record.context_id = context_id
    return request


# -- statuses, metrics, traces and the access log --------------------------------------
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
            except grpc.aio.AbortError:
                record.done(_code_of(context))
                raise
            except asyncio.CancelledError:
                record.done("CANCELLED")
                raise
            except Exception as exc:  # noqa: BLE001 - mapped to a status
                try:
                    await _fail(exc, method, context)
                finally:
                    record.done(_code_of(context))
            record.done("OK")
            return reply

        return _replace(handler, call)

    async def stream(request, context):
        record = _Call(of)
        _CALL.set(record)
        try:
            async for item in inner(request, context):
                yield item
        except grpc.aio.AbortError:
            record.done(_code_of(context))
            raise
        except (asyncio.CancelledError, GeneratorExit):
            record.done("CANCELLED")
            raise
        except Exception as exc:  # noqa: BLE001 - mapped to a status
            try:
                await _fail(exc, method, context)
            finally:
                record.done(_code_of(context))
        record.done("OK")

    return _replace(handler, stream)
