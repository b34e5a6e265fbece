"""Cross-cutting concerns applied to every RPC: authentication, error mapping
and RPC metrics."""

from __future__ import annotations

import hmac
import logging
import time
import uuid

import grpc
from google.protobuf.message import DecodeError

from sidecar import metrics
from sidecar.core.errors import CtxdError, InvalidArgument
from sidecar.server import status

log = logging.getLogger(__name__)

#: Methods reachable without a token (probes must work before auth is set up).
UNAUTHENTICATED_PREFIXES = ("/grpc.health.v1.Health/",)


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


def _refusal(handler: grpc.RpcMethodHandler | None, message: str) -> grpc.RpcMethodHandler:
    async def refuse(request_or_iterator, context):
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    async def refuse_stream(request_or_iterator, context):
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)
        yield  # pragma: no cover - makes this an async generator

    if handler is not None and handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(refuse_stream)
    if handler is not None and handler.stream_stream:
        return grpc.stream_stream_rpc_method_handler(refuse_stream)
    if handler is not None and handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(refuse)
    return grpc.unary_unary_rpc_method_handler(refuse)


class ServiceInterceptor(grpc.aio.ServerInterceptor):
    """Wraps ctxd's own handlers once per method: domain errors become statuses
    with ``google.rpc`` details, anything unexpected becomes INTERNAL with a log
    reference (never a stack trace), and every call is counted and timed."""

    def __init__(self) -> None:
        self._cache: dict[str, grpc.RpcMethodHandler] = {}

    async def intercept_service(self, continuation, handler_call_details):
        method = handler_call_details.method
        cached = self._cache.get(method)
        if cached is not None:
            return cached
        handler = await continuation(handler_call_details)
        if handler is None or not method.startswith("/ctxd."):
            return handler
        wrapped = _wrap(handler, method)
        self._cache[method] = wrapped
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


def _record(name: str, started: float, code: str) -> None:
    metrics.RPC_REQUESTS.labels(name, code).inc()
    metrics.RPC_LATENCY.labels(name, code).observe(time.perf_counter() - started)


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


def _wrap(handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
    name = method.rsplit("/", 1)[-1]
    decode = handler.request_deserializer
    if handler.unary_unary:
        inner = handler.unary_unary

        async def unary_unary(raw, context):
            started = time.perf_counter()
            try:
                reply = await inner(_decode(decode, raw), context)
            except grpc.aio.AbortError:
                _record(name, started, _code_of(context))
                raise
            except Exception as exc:  # noqa: BLE001 - mapped to a status
                try:
                    await _fail(exc, method, context)
                finally:
                    _record(name, started, _code_of(context))
            _record(name, started, "OK")
            return reply

        return grpc.unary_unary_rpc_method_handler(
            unary_unary, response_serializer=handler.response_serializer
        )
    if handler.unary_stream:
        inner_stream = handler.unary_stream

        async def unary_stream(raw, context):
            started = time.perf_counter()
            try:
                async for item in inner_stream(_decode(decode, raw), context):
                    yield item
            except grpc.aio.AbortError:
                _record(name, started, _code_of(context))
                raise
            except Exception as exc:  # noqa: BLE001 - mapped to a status
                try:
                    await _fail(exc, method, context)
                finally:
                    _record(name, started, _code_of(context))
            _record(name, started, "OK")

        return grpc.unary_stream_rpc_method_handler(
            unary_stream, response_serializer=handler.response_serializer
        )
    return handler
