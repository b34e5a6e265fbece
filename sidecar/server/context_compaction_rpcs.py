"""gRPC adapters for compaction and ``WatchContext`` (a mixin of
:class:`sidecar.server.context_service.ContextServicer`).

Protobuf in, :class:`sidecar.core.contexts.compaction.Compactor` calls,
protobuf out; the servicer provides ``self.compaction``.
"""

from __future__ import annotations

from sidecar.api.ctxd.v1 import context_pb2 as pb
from sidecar.core.contexts.compaction import ApplyResult, Compactor, WatchEvent
from sidecar.server.context_convert import summary_to_pb

_EVENT_KINDS = {
    "turn": pb.CONTEXT_EVENT_KIND_TURN,
    "compaction": pb.CONTEXT_EVENT_KIND_COMPACTION,
    "compaction_failed": pb.CONTEXT_EVENT_KIND_COMPACTION_FAILED,
    "plan": pb.CONTEXT_EVENT_KIND_PLAN,
    "skills": pb.CONTEXT_EVENT_KIND_SKILLS,
    "preflight": pb.CONTEXT_EVENT_KIND_PREFLIGHT,
    "deleted": pb.CONTEXT_EVENT_KIND_DELETED,
}


def _event_pb(ev: WatchEvent) -> pb.WatchContextResponse | None:
    kind = _EVENT_KINDS.get(ev.kind)
    if kind is None:
        return None
    return pb.WatchContextResponse(
        context_id=ev.context_id,
        kind=kind,
        version=ev.version,
        ts_ms=ev.ts,
        tokens_before=ev.tokens_before,
        tokens_after=ev.tokens_after,
        folded=ev.folded,
        detail=ev.detail,
    )


def _applied_pb(a: ApplyResult) -> pb.ApplyCompactionResponse:
    return pb.ApplyCompactionResponse(
        version=a.version,
        folded=a.folded,
        tokens_before=a.tokens_before,
        tokens_after=a.tokens_after,
        summary=summary_to_pb(a.summary),
        evicted_skills=a.evicted_skills,
    )


class CompactionRpcs:
    compaction: Compactor

    async def PlanCompaction(
        self, request: pb.PlanCompactionRequest, context
    ) -> pb.PlanCompactionResponse:
        p = await self.compaction.plan(request.context_id, request.keep_last, request.target_tokens)
        return pb.PlanCompactionResponse(
            nothing_to_do=p.nothing_to_do,
            reason=p.reason,
            plan_ref=p.plan_ref,
            base_version=p.base_version,
            fold_count=p.fold_count,
            fold_through_message_id=p.fold_through_id,
            system_prompt=p.system_prompt,
            excerpt=p.excerpt,
            answer_schema_json=p.answer_schema_json,
            tokens_before=p.tokens_before,
        )

    async def ApplyCompaction(
        self, request: pb.ApplyCompactionRequest, context
    ) -> pb.ApplyCompactionResponse:
        applied = await self.compaction.apply(request.context_id, request.plan_ref, request.answer)
        return _applied_pb(applied)

    async def Compact(self, request: pb.CompactRequest, context) -> pb.CompactResponse:
        r = await self.compaction.compact(
            request.context_id,
            request.keep_last,
            request.target_tokens,
            request.instructions,
            request.summariser,
        )
        resp = pb.CompactResponse(compacted=r.compacted, reason=r.reason, summariser=r.summariser)
        a = r.applied
        if a is not None:
            resp.version = a.version
            resp.folded = a.folded
            resp.tokens_before = a.tokens_before
            resp.tokens_after = a.tokens_after
            resp.summary.CopyFrom(summary_to_pb(a.summary))
        return resp

    async def WatchContext(self, request: pb.WatchContextRequest, context):
        sub = await self.compaction.watch(request.context_id)
        try:
            async for ev in sub:
                out = _event_pb(ev)
                if out is not None:
                    yield out
        finally:
            self.compaction.unwatch(sub)
