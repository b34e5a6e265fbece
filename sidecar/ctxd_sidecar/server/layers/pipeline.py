"""The layer mechanism: a :class:`Layer` wraps a method's handler once, when
it is registered (:class:`Pipeline`, :class:`Registrar`), not on every call:
``grpc.aio``'s interceptor chain runs a coroutine per interceptor for each
call before the handler is even found, which is a measurable share of a
sub-millisecond RPC. A call runs exactly the wrappers of its method."""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Sequence
from typing import Protocol

import grpc

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
