"""gRPC adapter for TruncateContext and CreateContext (see core.contexts.truncation).

A mixin of :class:`ctxd_sidecar.server.context_servicer.ContextServicer`,
which hands it ``self.edits`` (built by the composition root).
"""

from __future__ import annotations

import grpc

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.core.contexts.truncation import TranscriptEdits
from ctxd_sidecar.server.context_convert import (
    FORMAT_FROM_PB,
    expected_version,
    fill_msg_pb,
    info_to_pb,
    known,
    messages_json,
)


class ContextEdits:
    """TruncateContext and CreateContext, mixed into :class:`ContextServicer`
    over its use case, :class:`TranscriptEdits` (``self.edits``)."""

    edits: TranscriptEdits

    async def TruncateContext(
        self, request: pb.TruncateContextRequest, context: grpc.aio.ServicerContext
    ) -> pb.TruncateContextResponse:
        fmt = known(FORMAT_FROM_PB, request.format, "format", "message format")

        def render(removed) -> pb.TruncateContextResponse:
            # Converted before the commit: a failure here removes nothing.
            out = pb.TruncateContextResponse()
            for m in removed:
                fill_msg_pb(out.removed.add(), m)
            if fmt:
                out.removed_json = messages_json(fmt, removed)
            return out

        done = await self.edits.truncate(
            request.context_id,
            count=request.count,
            after_message_id=request.after_message_id,
            expected_version=expected_version(request),
            render=render,
        )
        resp = done.rendered if done.rendered is not None else pb.TruncateContextResponse()
        resp.version, resp.incarnation = done.version, done.incarnation
        return resp

    async def CreateContext(
        self, request: pb.CreateContextRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateContextResponse:
        created, info = await self.edits.create(
            request.context_id,
            principal=request.principal,
            model=request.model,
            model_window=request.model_window,
            task=request.task,
        )
        return pb.CreateContextResponse(created=created, info=info_to_pb(info))
