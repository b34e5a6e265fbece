"""gRPC adapter for ``ctxd.v1.ContextService`` over :mod:`sidecar.core.contexts`.

Converts protobuf to domain objects and back; every rule lives in the
domain (:class:`sidecar.core.contexts.ContextService`).
"""

from __future__ import annotations

from sidecar.api.ctxd.v1 import context_pb2, context_pb2_grpc
from sidecar.core.contexts import ContextService, TurnRequest
from sidecar.core.contexts.compaction import Compactor
from sidecar.core.errors import InvalidArgument
from sidecar.plugins import summarisers
from sidecar.server.context_compaction_rpcs import CompactionRpcs
from sidecar.server.context_convert import (
    _KIND_FROM_PB,
    fill_context_pb,
    fill_slice_pb,
    info_to_pb,
    msg_from_pb,
)
from sidecar.server.context_plan_rpcs import PlanSkillsRpcs

pb = context_pb2


class ContextServicer(PlanSkillsRpcs, CompactionRpcs, context_pb2_grpc.ContextServiceServicer):
    def __init__(self, config, storage, pm) -> None:
        self.config = config
        self.storage = storage
        self.service = ContextService(config.contexts, storage)
        self._init_plan_rpcs(config, self.service)
        self.compaction = Compactor(self.service, config, summarisers(config, pm))

    async def start(self) -> None:
        """Start background work (idle-conversation expiry, resumed deletions)."""
        await self.service.start()
        await self._start_plan_rpcs()
        self.compaction.start()

    async def stop(self) -> None:
        """Checkpoint resident contexts and finish background work."""
        await self._stop_plan_rpcs()
        await self.compaction.stop()
        await self.service.stop()

    async def AppendTurn(self, request: pb.AppendTurnRequest, context) -> pb.AppendTurnResponse:
        msgs = [msg_from_pb(m) for m in request.messages]
        result = await self.service.append_turn(
            TurnRequest(
                context_id=request.context_id,
                messages=msgs,
                expected_version=request.expected_version
                if request.HasField("expected_version")
                else None,
                idempotency_key=request.idempotency_key,
                principal=request.principal,
                model_window=request.model_window,
                model=request.model,
                task=request.task,
            )
        )
        skills = None if result.replayed else await self._turn_skills(request.context_id, msgs)
        return pb.AppendTurnResponse(
            version=skills.version if skills and skills.version else result.version,
            est_tokens=result.est_tokens,
            compaction_due=result.compaction_due,
            message_ids=result.message_ids,
            replayed=result.replayed,
            unknown_skills=skills.unknown if skills else (),
            loaded_skills=[pb.SkillRef(name=r.name, hash=r.hash) for r in skills.loaded]
            if skills
            else (),
        )

    async def GetContext(self, request: pb.GetContextRequest, context) -> pb.GetContextResponse:
        st = await self.service.get(request.context_id)
        # Converted without awaiting, so the record cannot change underneath.
        resp = pb.GetContextResponse(info=info_to_pb(st.info()))
        view = request.view
        if view in (pb.CONTEXT_VIEW_UNSPECIFIED, pb.CONTEXT_VIEW_FULL):
            fill_context_pb(resp.context, st)
        elif view == pb.CONTEXT_VIEW_SLICE:
            fill_slice_pb(resp.slice, st)
        elif view != pb.CONTEXT_VIEW_INFO:
            raise InvalidArgument("view", f"unknown view {view}")
        return resp

    async def ListContexts(
        self, request: pb.ListContextsRequest, context
    ) -> pb.ListContextsResponse:
        kind = _KIND_FROM_PB.get(request.kind)
        if kind is None:
            raise InvalidArgument("kind", f"unknown context kind {request.kind}")
        infos, token = await self.service.list_contexts(
            request.page_size, request.page_token, kind, request.include_archived
        )
        return pb.ListContextsResponse(
            contexts=[info_to_pb(i) for i in infos], next_page_token=token
        )

    async def DeleteContext(
        self, request: pb.DeleteContextRequest, context
    ) -> pb.DeleteContextResponse:
        deleted = await self.service.delete(
            request.context_id,
            request.expected_version if request.HasField("expected_version") else None,
        )
        return pb.DeleteContextResponse(deleted=deleted)

    async def RecordUsage(self, request: pb.RecordUsageRequest, context) -> pb.RecordUsageResponse:
        est, ratio = await self.service.record_usage(
            request.context_id, request.input_tokens, request.output_tokens, request.model
        )
        return pb.RecordUsageResponse(est_tokens=est, calibration=ratio)
