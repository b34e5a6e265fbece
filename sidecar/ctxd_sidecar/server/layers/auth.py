"""Authentication: a bearer token checked in constant time; health probes pass."""

from __future__ import annotations

import hmac
from collections.abc import Callable

import grpc

from ctxd_sidecar.server.layers.pipeline import (
    UNAUTHENTICATED_PREFIXES,
    _is_stream_reply,
    _kind,
    _replace,
)


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
