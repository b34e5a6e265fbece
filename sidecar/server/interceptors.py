"""Cross-cutting concerns applied to every RPC: error mapping."""

from __future__ import annotations

import logging
import uuid

import grpc

from sidecar.core.errors import CtxdError
from sidecar.server import status

log = logging.getLogger(__name__)


async def _abort(context: grpc.aio.ServicerContext, st: grpc.Status) -> None:
    await context.abort(st.code, st.details, st.trailing_metadata)


async def _handle(exc: Exception, method: str, context: grpc.aio.ServicerContext) -> None:
    if isinstance(exc, CtxdError):
        await _abort(context, status.to_status(exc))
    ref = uuid.uuid4().hex[:12]
    log.error("unhandled error", exc_info=exc, extra={"method": method, "reference": ref})
    await _abort(context, status.internal(ref))


class ErrorInterceptor(grpc.aio.ServerInterceptor):
    """Turns domain errors into statuses with details, and anything else into
    an INTERNAL status with a log reference (never a stack trace)."""

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


def _wrap(handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
    if handler.unary_unary:
        inner = handler.unary_unary

        async def unary_unary(request, context):
            try:
                return await inner(request, context)
            except (grpc.aio.AbortError, grpc.aio.BaseError):
                raise
            except Exception as exc:  # noqa: BLE001 - mapped to a status
                await _handle(exc, method, context)

        return grpc.unary_unary_rpc_method_handler(
            unary_unary,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
    if handler.unary_stream:
        inner_stream = handler.unary_stream

        async def unary_stream(request, context):
            try:
                async for item in inner_stream(request, context):
                    yield item
            except (grpc.aio.AbortError, grpc.aio.BaseError):
                raise
            except Exception as exc:  # noqa: BLE001 - mapped to a status
                await _handle(exc, method, context)

        return grpc.unary_stream_rpc_method_handler(
            unary_stream,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
    return handler
