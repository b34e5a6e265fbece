"""gRPC adapter for the history of a context: GetContextRequest.at_version,
ListVersions and ForkContext (see :mod:`ctxd_sidecar.core.contexts.history`).

A mixin of :class:`ctxd_sidecar.server.contexts.ContextServicer`, which
hands it ``self.contexts``.
"""

from __future__ import annotations

from functools import cached_property

import grpc

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.core.contexts.forks import Forks
from ctxd_sidecar.core.contexts.history import History
from ctxd_sidecar.core.errors import InvalidArgument
from ctxd_sidecar.server.context_convert import info_to_pb


def check_at(request: pb.GetContextRequest, field: str = "") -> None:
    """``at_version``'s own rules (the version itself is checked against the context)."""
    if request.at_version < 0:
        raise InvalidArgument(f"{field}at_version", "must not be negative (0 reads the latest)")
    if request.at_version and request.HasField("since_version"):
        raise InvalidArgument(
            f"{field}at_version",
            "goes without since_version (an earlier version is read whole); send one of them",
        )
    if request.at_version and field == "read.":
        raise InvalidArgument(
            "read.at_version",
            "a turn's read reads the version the turn made; read earlier ones with GetContext",
        )


class ContextHistory:
    """ListVersions and ForkContext, and the state a read at a version
    reads, mixed into :class:`ContextServicer`."""

    @cached_property
    def history(self) -> History:
        return History(self.contexts)

    @cached_property
    def forks(self) -> Forks:
        return Forks(self.contexts, self.history)

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
