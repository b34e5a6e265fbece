"""gRPC adapter for ``ctxd.v1.ContextService``.

Each method converts the request to domain terms (:mod:`.context_convert`),
calls the use case the composition root handed in, and converts the answer
back; domain errors become statuses in :mod:`ctxd_sidecar.server.layers`.
The rules of changes and of reads live in :mod:`ctxd_sidecar.core.contexts`
(a read's in :mod:`~ctxd_sidecar.core.contexts.reads`; its conversion is
:mod:`.read_convert`).
"""

from __future__ import annotations

import grpc

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.api.ctxd.v1 import context_pb2_grpc
from ctxd_sidecar.core.contexts import usage
from ctxd_sidecar.core.contexts.compaction import Compactor
from ctxd_sidecar.core.contexts.deletion import Deletion
from ctxd_sidecar.core.contexts.listing import Listing
from ctxd_sidecar.core.contexts.planning import Planning
from ctxd_sidecar.core.contexts.service import ContextService
from ctxd_sidecar.core.contexts.skillset import SkillSet
from ctxd_sidecar.core.contexts.turns import TurnRequest, Turns
from ctxd_sidecar.core.errors import InvalidArgument, Unavailable
from ctxd_sidecar.core.providers import relabel
from ctxd_sidecar.server import read_convert, wire
from ctxd_sidecar.server.context_convert import (
    KIND_FROM_PB,
    OUTCOME_FROM_PB,
    applied_pb,
    binding_from_pb,
    cache_pb,
    event_pb,
    expected_version,
    fill_msg_pb,
    info_to_pb,
    known,
    plan_edit_from_pb,
    plan_or_none_pb,
    record_pb,
    summary_to_pb,
    turn_messages,
)
from ctxd_sidecar.server.context_edits import ContextEdits, TranscriptEdits
from ctxd_sidecar.server.context_history import ContextHistory, Forks, History
from ctxd_sidecar.server.usage_convert import cache_usage_pb


class ContextServicer(ContextEdits, ContextHistory, context_pb2_grpc.ContextServiceServicer):
    """``ctxd.v1.ContextService`` over the contexts room's use cases, each handed
    in by the composition root (TruncateContext, CreateContext: :class:`ContextEdits`)."""

    def __init__(
        self,
        *,
        contexts: ContextService,
        turns: Turns,
        listing: Listing,
        deletion: Deletion,
        compactor: Compactor,
        planning: Planning,
        skillset: SkillSet,
        edits: TranscriptEdits,
        history: History,
        forks: Forks,
    ) -> None:
        self.history, self.forks = history, forks
        self.contexts, self.edits = contexts, edits
        self.turns = turns
        self.listing = listing
        self.deletion = deletion
        self.compactor = compactor
        self.planning = planning
        self.skillset = skillset

    # -- turns and reads -----------------------------------------------------------------------
    async def AppendTurn(
        self, request: pb.AppendTurnRequest, context: grpc.aio.ServicerContext
    ) -> pb.AppendTurnResponse | bytes:
        read = read_convert.turn_read(request)
        messages, origins = turn_messages(request)
        try:
            r = await self.turns.append(
                TurnRequest(
                    context_id=request.context_id,
                    messages=messages,
                    expected_version=expected_version(request),
                    idempotency_key=request.idempotency_key,
                    principal=request.principal,
                    model_window=request.model_window,
                    model=request.model,
                    task=request.task,
                    read=read,
                )
            )
        except InvalidArgument as exc:
            if origins is None:
                raise
            raise relabel(exc, origins) from None
        reply = pb.AppendTurnResponse(
            version=r.version,
            est_tokens=r.est_tokens,
            compaction_due=r.compaction_due,
            message_ids=r.message_ids,
            replayed=r.replayed,
            unknown_skills=r.unknown_skills,
            loaded_skills=[pb.SkillRef(name=s.name, hash=s.hash) for s in r.loaded_skills],
            incarnation=r.incarnation,
        )
        if read is None or r.read_back is None:
            return reply
        answer = read_convert.answer(r.read_back, read, self.contexts.compactions)
        return wire.embed(
            reply.SerializeToString(),
            pb.AppendTurnResponse.READ_FIELD_NUMBER,
            read_convert.serialized(answer),
        )

    async def GetContext(
        self, request: pb.GetContextRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetContextResponse | bytes:
        read = read_convert.read_request(request)
        st = await self.contexts.get(read.context_id, latest=read.latest)
        st = await self.state_at(st, read.at_version)
        return read_convert.answer(st, read, self.contexts.compactions)

    async def ListContexts(
        self, request: pb.ListContextsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListContextsResponse:
        infos, token = await self.listing.page(
            request.page_size,
            request.page_token,
            known(KIND_FROM_PB, request.kind, "kind", "context kind"),
            request.include_archived,
            id_prefix=request.id_prefix,
        )
        return pb.ListContextsResponse(
            contexts=[info_to_pb(i) for i in infos], next_page_token=token
        )

    async def DeleteContext(
        self, request: pb.DeleteContextRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteContextResponse:
        deleted = await self.deletion.delete(request.context_id, expected_version(request))
        return pb.DeleteContextResponse(deleted=deleted)

    async def RecordUsage(
        self, request: pb.RecordUsageRequest, context: grpc.aio.ServicerContext
    ) -> pb.RecordUsageResponse:
        est, ratio, cache = await usage.record_usage(
            self.contexts,
            request.context_id,
            request.input_tokens,
            request.output_tokens,
            request.model,
            request.cached_input_tokens if request.HasField("cached_input_tokens") else None,
            request.cache_write_tokens if request.HasField("cache_write_tokens") else None,
        )
        return pb.RecordUsageResponse(
            est_tokens=est, calibration=ratio, cache_usage=cache_usage_pb(cache)
        )

    # -- compaction ----------------------------------------------------------------------------
    async def PlanCompaction(
        self, request: pb.PlanCompactionRequest, context: grpc.aio.ServicerContext
    ) -> pb.PlanCompactionResponse:
        p = await self.compactor.plan(request.context_id, request.keep_last, request.target_tokens)
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
            cache=cache_pb(p.cache),
        )

    async def ApplyCompaction(
        self, request: pb.ApplyCompactionRequest, context: grpc.aio.ServicerContext
    ) -> pb.ApplyCompactionResponse:
        applied = await self.compactor.apply(request.context_id, request.plan_ref, request.answer)
        return applied_pb(applied, self._record(applied.record))

    async def Compact(
        self, request: pb.CompactRequest, context: grpc.aio.ServicerContext
    ) -> pb.CompactResponse:
        r = await self.compactor.compact(
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
            if a.cache is not None:
                resp.cache.CopyFrom(cache_pb(a.cache))
            if a.record is not None:
                resp.compaction.CopyFrom(record_pb(self._record(a.record)))
        return resp

    def _record(self, record):
        return self.contexts.compaction_info(record) if record is not None else None

    async def ExpandCompaction(
        self, request: pb.ExpandCompactionRequest, context: grpc.aio.ServicerContext
    ) -> pb.ExpandCompactionResponse:
        record, messages, token = await self.contexts.expand(
            request.context_id, request.compaction_id, request.page_size, request.page_token
        )
        resp = pb.ExpandCompactionResponse(compaction=record_pb(record), next_page_token=token)
        for m in messages:
            fill_msg_pb(resp.messages.add(), m)
        return resp

    async def WatchContext(
        self, request: pb.WatchContextRequest, context: grpc.aio.ServicerContext
    ):
        sub = await self.contexts.watch(request.context_id)
        last = ""
        try:
            async for ev in sub:
                last = ev.kind
                out = event_pb(ev, self._record(ev.compaction))
                if out is not None:
                    yield out
        finally:
            self.contexts.unwatch(sub)
        if last != "deleted":
            # The feed closed under the watcher: the server is stopping. Ending
            # OK would look like "nothing more will happen"; UNAVAILABLE says retry.
            raise Unavailable("server is stopping; watch again once it is back")

    # -- plan and preflight --------------------------------------------------------------------
    async def UpdatePlan(
        self, request: pb.UpdatePlanRequest, context: grpc.aio.ServicerContext
    ) -> pb.UpdatePlanResponse:
        edit = plan_edit_from_pb(request)
        result = await self.planning.update_plan(
            request.context_id, edit, expected_version=expected_version(request)
        )
        return pb.UpdatePlanResponse(version=result.version, plan=plan_or_none_pb(result.plan))

    async def ReportRun(
        self, request: pb.ReportRunRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReportRunResponse:
        if not request.HasField("binding"):
            raise InvalidArgument("binding", "must name the run, subagent or task")
        binding = binding_from_pb(request.binding, "binding")
        outcome = OUTCOME_FROM_PB.get(request.outcome)
        if outcome is None:
            raise InvalidArgument("outcome", "must be SUCCEEDED, FAILED or CANCELLED")
        result = await self.planning.report_run(
            request.context_id, binding, outcome, request.reason
        )
        return pb.ReportRunResponse(
            version=result.version, plan=plan_or_none_pb(result.plan), item_id=result.item_id
        )

    async def SetPreflight(
        self, request: pb.SetPreflightRequest, context: grpc.aio.ServicerContext
    ) -> pb.SetPreflightResponse:
        version = await self.planning.set_preflight(
            request.context_id, request.verdict_json, expected_version=expected_version(request)
        )
        return pb.SetPreflightResponse(version=version)

    # -- skills and prompt ---------------------------------------------------------------------
    async def ListSkills(
        self, request: pb.ListSkillsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListSkillsResponse:
        return pb.ListSkillsResponse(
            skills=[
                pb.SkillInfo(
                    name=e.name,
                    description=e.description,
                    when_to_use=e.when_to_use,
                    source=e.source,
                    available=e.available,
                )
                for e in self.skillset.entries()
            ]
        )

    async def LoadSkill(
        self, request: pb.LoadSkillRequest, context: grpc.aio.ServicerContext
    ) -> pb.LoadSkillResponse:
        change = await self.skillset.load(request.context_id, request.name)
        ref = change.ref
        return pb.LoadSkillResponse(
            version=change.version,
            skill=pb.SkillRef(name=ref.name, hash=ref.hash) if ref else None,
            truncated=change.truncated,
        )

    async def UnloadSkill(
        self, request: pb.UnloadSkillRequest, context: grpc.aio.ServicerContext
    ) -> pb.UnloadSkillResponse:
        change = await self.skillset.unload(request.context_id, request.name)
        return pb.UnloadSkillResponse(version=change.version, unloaded=change.changed)

    async def RenderPrompt(
        self, request: pb.RenderPromptRequest, context: grpc.aio.ServicerContext
    ) -> pb.RenderPromptResponse:
        out = await self.skillset.render(request.context_id, request.agent)
        p = out.prompt
        return pb.RenderPromptResponse(
            prompt=p.text,
            prefix_hash=p.prefix_hash,
            prefix_end=p.prefix_end,
            prefix_rebuilt=p.rebuilt,
            version=out.version,
        )
