"""gRPC adapter for ``ctxd.v1.ContextService`` over :mod:`sidecar.core.contexts`."""

from __future__ import annotations

from sidecar.api.ctxd.v1 import context_pb2_grpc


class ContextServicer(context_pb2_grpc.ContextServiceServicer):
    def __init__(self, config, storage, pm) -> None:
        self.config = config
        self.storage = storage

    async def start(self) -> None:
        """Start background work (idle-conversation expiry)."""

    async def stop(self) -> None:
        """Stop background work and flush pending state."""
