"""Cross-cutting concerns applied to every RPC: authentication, admission and
drain, error mapping, RPC metrics and the access log."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import inspect
import logging
import time
import uuid

import grpc
from google.protobuf.message import DecodeError

from sidecar import metrics
from sidecar.core.errors import CtxdError, InvalidArgument, LimitExceeded
from sidecar.server import status

log = logging.getLogger(__name__)

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


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Requires ``authorization: Bearer <token>`` on every call but health.

    The comparison is constant-time; the token never appears in logs or errors.
    """

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()

    async def intercept_service(self, continuation, handler_call_details):
        method = handler_call_details.method
        if not method.startswith(UNAUTHENTICATED_PREFIXES):
            presented = b""
            for key, value in handler_call_details.invocation_metadata or ():
                if key == "authorization":
                    presented = value.encode() if isinstance(value, str) else value
                    break
            if not hmac.compare_digest(presented, self._expected):
                handler = await continuation(handler_call_details)
                return _refusal(handler, "missing or invalid bearer token")
        return await continuation(handler_call_details)


def _refusal(
    handler: grpc.RpcMethodHandler | None,
    message: str,
    code: grpc.StatusCode = grpc.StatusCode.UNAUTHENTICATED,
) -> grpc.RpcMethodHandler:
    async def refuse(request_or_iterator, context):
        await context.abort(code, message)

    async def refuse_stream(request_or_iterator, context):
        await context.abort(code, message)
        yield  # pragma: no cover - makes this an async generator

    if handler is not None and handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(refuse_stream)
    if handler is not None and handler.stream_stream:
        return grpc.stream_stream_rpc_method_handler(refuse_stream)
    if handler is not None and handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(refuse)
    return grpc.unary_unary_rpc_method_handler(refuse)


class Gate(grpc.aio.ServerInterceptor):
    """Admission and drain. Counts the unary calls in flight so shutdown can
    wait for them itself (``server.stop(grace)`` cancels whatever is left at
    the end of grace); once stopping, refuses new calls with UNAVAILABLE
    (Health.Check still answers NOT_SERVING); caps concurrent streams; and
    ends the open ones with UNAVAILABLE when the server stops."""

    def __init__(self, stream_caps: dict[str, tuple[str, int]] | None = None) -> None:
        #: method -> (setting name, most streams open at once)
        self._caps = stream_caps or {}
        self._open: dict[str, int] = {}
        self._cache: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}
        self.stopping = False
        self.in_flight = 0
        self._admitted = 0.0
        self._streams_end = asyncio.Event()

    async def intercept_service(self, continuation, handler_call_details):
        method = handler_call_details.method
        if self.stopping and method != HEALTH_CHECK:
            handler = await continuation(handler_call_details)
            return _refusal(handler, STOPPING, grpc.StatusCode.UNAVAILABLE)
        self._admitted = time.monotonic()
        handler = await continuation(handler_call_details)
        if handler is None or not (handler.unary_unary or handler.unary_stream):
            return handler
        cached = self._cache.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = self._unary(handler) if handler.unary_unary else self._stream(handler, method)
        self._cache[method] = (handler, wrapped)
        return wrapped

    def _unary(self, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        inner = handler.unary_unary

        async def unary_unary(request, context):
            self.in_flight += 1
            try:
                return await inner(request, context)
            finally:
                self.in_flight -= 1

        return grpc.unary_unary_rpc_method_handler(
            unary_unary,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _stream(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        inner = handler.unary_stream
        cap = self._caps.get(method)

        async def unary_stream(request, context):
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

        return grpc.unary_stream_rpc_method_handler(
            unary_stream,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

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


class ServiceInterceptor(grpc.aio.ServerInterceptor):
    """The outermost interceptor, so refusals (auth, stopping) are counted too.
    Wraps handlers once per method: for ctxd's own, domain errors become
    statuses with ``google.rpc`` details and anything unexpected becomes
    INTERNAL with a log reference (never a stack trace); every unary or
    server-streaming call is counted, timed and given one access line."""

    def __init__(self, access_level: int | None = logging.INFO, tracing=None) -> None:
        #: method -> (the handler below, its wrapper); refusals are new each call.
        self._cache: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}
        self._access = access_level
        #: Spans per RPC (sidecar.server.tracing), when tracing is configured.
        self._tracing = tracing

    async def intercept_service(self, continuation, handler_call_details):
        method = handler_call_details.method
        handler = await continuation(handler_call_details)
        if handler is None or not (handler.unary_unary or handler.unary_stream):
            return handler
        cached = self._cache.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = _wrap(handler, method, self._access, self._tracing)
        self._cache[method] = (handler, wrapped)
        return wrapped


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


class _Call:
    """One call's figures for metrics and the access line (never payloads)."""

    __slots__ = ("service", "name", "access", "started", "context_id", "tracing", "span")

    def __init__(self, service: str, name: str, access: int | None, tracing) -> None:
        self.service, self.name, self.access = service, name, access
        self.started = time.perf_counter()
        self.context_id = ""
        self.tracing = tracing
        self.span = tracing.start_rpc(service, name) if tracing is not None else None

    def done(self, code: str) -> None:
        elapsed = time.perf_counter() - self.started
        if self.span is not None:
            self.tracing.end_rpc(*self.span, code, self.context_id)
            self.span = None
        metrics.RPC_REQUESTS.labels(self.service, self.name, code).inc()
        metrics.RPC_LATENCY.labels(self.service, self.name, code).observe(elapsed)
        if self.access is not None and access_log.isEnabledFor(self.access):
            extra = {
                "service": self.service,
                "method": self.name,
                "code": code,
                "duration_ms": round(elapsed * 1000, 3),
            }
            if self.context_id:
                extra["context_id"] = self.context_id
            access_log.log(self.access, "rpc", extra=extra)


access_log = logging.getLogger("ctxd.access")


def _decode(decode, raw: bytes):
    """Parse the request here rather than in gRPC, so bytes that are not the
    method's message get INVALID_ARGUMENT instead of a framework error."""
    if decode is None:
        return raw
    try:
        return decode(raw)
    except DecodeError:
        raise InvalidArgument(
            "request", "is not a valid protobuf message for this method"
        ) from None


def _wrap(handler: grpc.RpcMethodHandler, method: str, access: int | None, tracing=None):
    service, _, name = method.lstrip("/").rpartition("/")
    ours = method.startswith("/ctxd.")
    # ctxd's own requests are decoded here (see _decode); others by gRPC.
    decode = handler.request_deserializer if ours else None
    kept = None if ours else handler.request_deserializer
    inner = handler.unary_unary or handler.unary_stream
    make = (
        grpc.unary_unary_rpc_method_handler
        if handler.unary_unary
        else grpc.unary_stream_rpc_method_handler
    )

    if not inspect.isasyncgenfunction(inner):
        # Unary calls, and streams that write through context.write (the gate's,
        # grpc's Health.Watch).

        async def call(raw, context):
            record = _Call(service, name, access, tracing)
            try:
                request = _decode(decode, raw)
                record.context_id = getattr(request, "context_id", "") or ""
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

        return make(
            call, request_deserializer=kept, response_serializer=handler.response_serializer
        )

    async def stream(raw, context):
        record = _Call(service, name, access, tracing)
        try:
            request = _decode(decode, raw)
            record.context_id = getattr(request, "context_id", "") or ""
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

    return make(stream, request_deserializer=kept, response_serializer=handler.response_serializer)
