"""Request decoding: a malformed request is INVALID_ARGUMENT before any handler runs."""

from __future__ import annotations

import grpc
from google.protobuf.message import DecodeError

from ctxd_sidecar.core.errors import InvalidArgument
from ctxd_sidecar.server.layers.calls import _CALL
from ctxd_sidecar.server.layers.pipeline import _is_stream_reply, _kind, _replace


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
