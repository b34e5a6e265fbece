"""gRPC adapter for ``ctxd.v1.ContextService``.

Each method converts the request to domain terms (:mod:`.context_convert`),
calls the use case the composition root handed in, and converts the answer
back; domain errors become statuses in :mod:`ctxd_sidecar.server.layers`.
The rules of changes live in :mod:`ctxd_sidecar.core.contexts`. Those of a
read do not yet: which request fields go together (:func:`_read_of`), the
JSON page budget (:func:`_json_page`) and the choice between the transcript
pager and the provider pager (``_answer``) are decided here.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.api.ctxd.v1 import context_pb2_grpc
from ctxd_sidecar.core import providers
from ctxd_sidecar.core.contexts import views
from ctxd_sidecar.core.contexts.compaction import Compactor
from ctxd_sidecar.core.contexts.deletion import Deletion
from ctxd_sidecar.core.contexts.listing import Listing
from ctxd_sidecar.core.contexts.planning import Planning
from ctxd_sidecar.core.contexts.service import ContextService
from ctxd_sidecar.core.contexts.skillset import SkillSet
from ctxd_sidecar.core.contexts.turns import TurnRequest, Turns
from ctxd_sidecar.core.errors import CtxdError, InvalidArgument, Unavailable
from ctxd_sidecar.core.providers import pages as provider_pages
from ctxd_sidecar.core.providers import relabel
from ctxd_sidecar.server import wire
from ctxd_sidecar.server.context_convert import (
    FORMAT_FROM_PB,
    KIND_FROM_PB,
    OUTCOME_FROM_PB,
    applied_pb,
    binding_from_pb,
    cache_pb,
    context_meta_pb,
    event_pb,
    expected_version,
    fill_msg_pb,
    info_to_pb,
    plan_edit_from_pb,
    plan_or_none_pb,
    record_pb,
    slice_blocks_pb,
    slice_json,
    summary_to_pb,
    turn_messages,
)
from ctxd_sidecar.server.context_edits import ContextEdits, TranscriptEdits
from ctxd_sidecar.server.context_history import ContextHistory, check_at

_VIEWS = {
    pb.CONTEXT_VIEW_UNSPECIFIED: views.FULL,
    pb.CONTEXT_VIEW_FULL: views.FULL,
    pb.CONTEXT_VIEW_SLICE: views.SLICE,
    pb.CONTEXT_VIEW_INFO: "info",
}
#: ``latest`` for ContextService.get (None: the configured default).
_CONSISTENCY = {
    pb.READ_CONSISTENCY_UNSPECIFIED: None,
    pb.READ_CONSISTENCY_LATEST: True,
    pb.READ_CONSISTENCY_CACHED: False,
}
_CHANGE = {
    "": pb.SLICE_CHANGE_UNSPECIFIED,
    views.NONE: pb.SLICE_CHANGE_NONE,
    views.APPEND: pb.SLICE_CHANGE_APPEND,
    views.REPLACE: pb.SLICE_CHANGE_REPLACE,
}


@dataclass(frozen=True, slots=True)
class _Read:
    """A GetContextRequest checked whole, before anything is read or appended."""

    request: pb.GetContextRequest
    view: str
    #: ``latest`` for ContextService.get (None: the configured default).
    latest: bool | None
    since: int | None
    #: The incarnation ``since`` belongs to ("": not sent, the version alone decides).
    incarnation: str
    #: "" or a provider format of the slice.
    fmt: str


def _read_of(request: pb.GetContextRequest, field: str = "") -> _Read:
    """``request``'s settings, refused with the field named (``field`` prefixes
    it: ``read.`` inside an AppendTurnRequest)."""
    view = _VIEWS.get(request.view)
    if view is None:
        raise InvalidArgument(f"{field}view", f"unknown view {request.view}")
    if request.consistency not in _CONSISTENCY:
        raise InvalidArgument(f"{field}consistency", f"unknown consistency {request.consistency}")
    # A later page goes on from the first, which checked the store; the token pins the view.
    latest = False if request.page_token else _CONSISTENCY[request.consistency]
    since = request.since_version if request.HasField("since_version") else None
    if since is not None and since < 0:
        raise InvalidArgument(f"{field}since_version", "must not be negative")
    incarnation = request.since_incarnation
    if incarnation and since is None:
        raise InvalidArgument(
            f"{field}since_incarnation",
            "goes with since_version (the incarnation of the version held); set both or neither",
        )
    if len(incarnation) > views.MAX_INCARNATION:
        raise InvalidArgument(
            f"{field}since_incarnation",
            f"is {len(incarnation)} characters; send back the ContextInfo.incarnation a read "
            "returned",
        )
    if request.page_size < 0:
        raise InvalidArgument(f"{field}page_size", "must not be negative")
    fmt = FORMAT_FROM_PB.get(request.format)
    if fmt is None:
        raise InvalidArgument(f"{field}format", f"unknown message format {request.format}")
    if fmt and view != views.SLICE:
        raise InvalidArgument(f"{field}format", "goes with CONTEXT_VIEW_SLICE")
    if request.last_n < 0:
        raise InvalidArgument(f"{field}last_n", "must not be negative (0 reads all)")
    if request.last_n and since is not None:
        raise InvalidArgument(
            f"{field}last_n", "goes without since_version (an incremental read is already a tail)"
        )
    check_at(request, field)
    return _Read(request, view, latest, since, incarnation, fmt)


def _turn_read(request: pb.AppendTurnRequest) -> _Read:
    """AppendTurnRequest.read, checked before the turn is appended."""
    read = request.read
    if read.context_id and read.context_id != request.context_id:
        raise InvalidArgument("read.context_id", "must be empty or the turn's context_id")
    if read.page_token:
        raise InvalidArgument(
            "read.page_token", "a turn's read starts at the first page; continue with GetContext"
        )
    return _read_of(read, "read.")


#: What a page in a provider's JSON shape may take (messages and system
#: JSON), under a default client's 4 MiB with room for the rest of the reply.
JSON_PAGE_BYTES = 3 * 1024 * 1024 + 768 * 1024


def _json_page(read: _Read, st, page: views.Page) -> tuple[views.Page, tuple[str, str]]:
    """``page`` in ``read.fmt``, with fewer messages while its JSON is over
    :data:`JSON_PAGE_BYTES`: pages are sized by stored bytes, and escaping
    can take several times as much (``\u0001``, quotes in JSON text)."""
    request = read.request
    while True:
        out = slice_json(
            read.fmt, st, page, request.cache_breakpoint, blocks=not request.without_summary_blocks
        )
        count = len(page.messages)
        if count <= 1 or sum(len(x) for x in out) * 4 <= JSON_PAGE_BYTES:
            return page, out  # four bytes a character at most: no need to encode
        if sum(len(x.encode()) for x in out) <= JSON_PAGE_BYTES:
            return page, out
        page = views.read(
            st,
            read.view,
            size=count // 2,
            token=request.page_token,
            since=read.since,
            incarnation=read.incarnation,
            last=request.last_n,
        )


def _serialized(reply: pb.GetContextResponse | bytes) -> bytes:
    return reply if isinstance(reply, bytes) else reply.SerializeToString()


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
    ) -> None:
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
        read = _turn_read(request) if request.HasField("read") else None
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
        if read is None:
            return reply
        # A committed turn took the next version, so the cached copy holds
        # every write acknowledged before this call (LATEST asks the store
        # again for what came after); a replayed one committed nothing now
        # and reads as GetContext would.
        latest = read.latest
        if latest is None and not r.replayed:
            latest = False
        try:
            st = await self.contexts.get(request.context_id, latest=latest)
            answer = self._answer(read, st)
        except CtxdError:
            # Deleted (or unreadable) since the commit: the turn stands, and
            # an error now would invite a retry of what is already durable.
            return reply
        return wire.embed(
            reply.SerializeToString(), pb.AppendTurnResponse.READ_FIELD_NUMBER, _serialized(answer)
        )

    async def GetContext(
        self, request: pb.GetContextRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetContextResponse:
        read = _read_of(request)
        st = await self.contexts.get(request.context_id, latest=read.latest)
        return self._answer(read, await self.state_at(st, request.at_version))

    def _answer(self, read: _Read, st) -> pb.GetContextResponse | bytes:
        """The reply to ``read`` from ``st``, converted without awaiting so the
        record cannot change underneath."""
        request, view = read.request, read.view
        resp = pb.GetContextResponse(info=info_to_pb(st.info()))
        if view == "info":
            return resp
        if read.fmt in (providers.OPENAI, providers.ANTHROPIC):
            # Cut from the rendered request (or tail), so pages and deltas join validly.
            jp = provider_pages.read(
                read.fmt,
                st,
                size=request.page_size,
                token=request.page_token,
                since=read.since,
                incarnation=read.incarnation,
                mark=request.cache_breakpoint,
                blocks=not request.without_summary_blocks,
                last=request.last_n,
            )
            resp.messages_json, resp.system_json = jp.messages_json, jp.system_json
            resp.next_page_token, resp.change = jp.next_token, _CHANGE[jp.change]
            return resp
        page = views.read(
            st,
            view,
            size=request.page_size,
            token=request.page_token,
            since=read.since,
            incarnation=read.incarnation,
            last=request.last_n,
        )
        if read.fmt:
            page, (resp.messages_json, resp.system_json) = _json_page(read, st, page)
        resp.next_page_token = page.next_token
        resp.change = _CHANGE[page.change]
        # Assembled from each message's encoded bytes (see ctxd_sidecar.server.wire).
        if view == views.FULL:
            meta = context_meta_pb(st)
            meta.compactions.extend(record_pb(r) for r in self.contexts.compactions(st))
            return wire.full_reply(resp, meta, page.messages)
        if read.fmt:
            return resp
        blocks = slice_blocks_pb(st) if page.first and not request.without_summary_blocks else []
        return wire.slice_reply(resp, blocks, page.messages)

    async def ListContexts(
        self, request: pb.ListContextsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListContextsResponse:
        kind = KIND_FROM_PB.get(request.kind)
        if kind is None:
            raise InvalidArgument("kind", f"unknown context kind {request.kind}")
        infos, token = await self.listing.page(
            request.page_size,
            request.page_token,
            kind,
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
        est, ratio = await self.contexts.record_usage(
            request.context_id, request.input_tokens, request.output_tokens, request.model
        )
        return pb.RecordUsageResponse(est_tokens=est, calibration=ratio)

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
