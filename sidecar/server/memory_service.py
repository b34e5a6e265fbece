"""gRPC adapter for ``ctxd.v1.MemoryService`` over :mod:`sidecar.core.memory`."""

from __future__ import annotations

from sidecar.api.ctxd.v1 import memory_pb2_grpc


class MemoryServicer(memory_pb2_grpc.MemoryServiceServicer):
    def __init__(self, config, storage, pm) -> None:
        self.config = config
        self.storage = storage

    async def start(self) -> None:
        """Start background work (the expiry sweeper)."""

    async def stop(self) -> None:
        """Stop background work."""
