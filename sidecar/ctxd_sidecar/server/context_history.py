"""gRPC adapter for the history of a context: GetContextRequest.at_version,
ListVersions and ForkContext (see :mod:`ctxd_sidecar.core.contexts.history`).

A mixin of :class:`ctxd_sidecar.server.context_servicer.ContextServicer`, which
hands it ``self.contexts``, ``self.history`` and ``self.forks`` (built by
the composition root).
"""

from __future__ import annotations

import grpc

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.core.contexts.forks import Forks
from ctxd_sidecar.core.contexts.history import History
from ctxd_sidecar.server.context_convert import info_to_pb


class ContextHistory:
    """ListVersions and ForkContext, and the state a read at a version
    reads, mixed into :class:`ContextServicer`."""

    history: History
    forks: Forks

    async def ForkContext(
        self, request: pb.ForkContextRequest, context: grpc.aio.ServicerContext
    ) -> pb.ForkContextResponse:
        info = await self.forks.fork(
            request.source_id, request.at_version, request.context_id, request.idempotency_key
        )
        return pb.ForkContextResponse(info=info_to_pb(info))

    async def state_at(self, st, version: int):
        """``st`` (the latest state) as of ``version`` (0: the latest)."""
        return await self.history.at(st, version) if version else st

    async def ListVersions(
        self, request: pb.ListVersionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListVersionsResponse:
        st = await self.contexts.get(request.context_id)
        infos, token, oldest = await self.history.versions(
            st, request.page_size, request.page_token
        )
        return pb.ListVersionsResponse(
            versions=[
                pb.VersionInfo(
                    version=i.version,
                    kind=i.kind,
                    created_ms=i.created_ms,
                    message_count=i.message_count,
                    est_tokens=i.est_tokens,
                )
                for i in infos
            ],
            next_page_token=token,
            oldest_kept=oldest,
        )
