"""Registering ctxd's services on the server from their descriptors.

The generated ``add_*Servicer_to_server`` functions fix every reply's
serializer to ``SerializeToString``. GetContext replies may be assembled as
bytes (:mod:`ctxd_sidecar.server.wire`), so its serializer passes bytes through;
every other method is registered exactly as the generated code would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor

if TYPE_CHECKING:
    from ctxd_sidecar.server.layers import Registrar


def _passing_bytes(serialize: Callable[[object], bytes]) -> Callable[[object], bytes]:
    def serializer(reply: object) -> bytes:
        return reply if isinstance(reply, bytes) else serialize(reply)

    return serializer


def add_service(
    server: grpc.aio.Server | Registrar,
    servicer: object,
    service: ServiceDescriptor,
    *,
    raw_replies: Iterable[str] = (),
) -> None:
    """Register every method of ``service`` on ``server``; methods named in
    ``raw_replies`` may answer with already-encoded bytes."""
    raw = set(raw_replies)
    handlers: dict[str, grpc.RpcMethodHandler] = {}
    for method in service.methods:
        request = message_factory.GetMessageClass(method.input_type)
        reply = message_factory.GetMessageClass(method.output_type)
        serialize = reply.SerializeToString
        if method.name in raw:
            serialize = _passing_bytes(serialize)
        make = (
            grpc.unary_stream_rpc_method_handler
            if method.server_streaming
            else grpc.unary_unary_rpc_method_handler
        )
        handlers[method.name] = make(
            getattr(servicer, method.name),
            request_deserializer=request.FromString,
            response_serializer=serialize,
        )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )
    server.add_registered_method_handlers(service.full_name, handlers)
