"""Protobuf <-> domain conversions for ``ctxd.v1.ContextService`` messages.

Used by :mod:`ctxd_sidecar.server.context_servicer`; no rules live here.
"""

from __future__ import annotations

import json

from google.protobuf import json_format

from ctxd_sidecar.api.ctxd.v1 import context_pb2
from ctxd_sidecar.core import providers
from ctxd_sidecar.core.compaction.fidelity import Fidelity
from ctxd_sidecar.core.contexts.archive import CompactionInfo
from ctxd_sidecar.core.contexts.compaction import ApplyResult, CacheEffect
from ctxd_sidecar.core.contexts.events import WatchEvent
from ctxd_sidecar.core.contexts.model import (
    ASSISTANT,
    CONVERSATION,
    NOTE,
    ROOT,
    SYSTEM,
    TOOL,
    USER,
    ContextInfo,
    ContextState,
    Msg,
    Native,
    ToolCall,
)
from ctxd_sidecar.core.errors import InvalidArgument
from ctxd_sidecar.core.jsonvalue import parse_json
from ctxd_sidecar.core.plan import Binding, BindingKind, PlanItemSpec, PlanStatus, RunOutcome
from ctxd_sidecar.server.usage_convert import cache_cost_pb, cache_usage_pb

pb = context_pb2

_KIND_TO_PB = {ROOT: pb.CONTEXT_KIND_ROOT, CONVERSATION: pb.CONTEXT_KIND_CONVERSATION}
KIND_FROM_PB = {
    pb.CONTEXT_KIND_UNSPECIFIED: "",
    pb.CONTEXT_KIND_ROOT: ROOT,
    pb.CONTEXT_KIND_CONVERSATION: CONVERSATION,
}


# -- messages ----------------------------------------------------------------------------
def msg_from_pb(m: pb.Message) -> Msg:
    """A request message as a domain message (kind "" when none is set; the
    domain rejects it with the field named)."""
    msg = _msg_from_pb(m)
    if m.HasField("native"):
        msg.native = Native(m.native.format, m.native.data)
        msg.nbytes = -1
    return msg


def _msg_from_pb(m: pb.Message) -> Msg:
    kind = m.WhichOneof("kind")
    ts = m.ts_ms
    if kind == "user":
        return Msg(USER, text=m.user.text, principal=m.user.principal, ts=ts)
    if kind == "assistant":
        calls = tuple(ToolCall(c.id, c.name, c.arguments_json) for c in m.assistant.tool_calls)
        return Msg(ASSISTANT, text=m.assistant.text, tool_calls=calls, ts=ts)
    if kind == "tool":
        t = m.tool
        is_json = t.WhichOneof("content") == "json"
        return Msg(
            TOOL,
            call_id=t.call_id,
            name=t.name,
            content=t.json if is_json else t.text,
            content_json=is_json,
            is_error=t.is_error,
            ts=ts,
        )
    if kind == "system":
        return Msg(SYSTEM, text=m.system.text, ts=ts)
    if kind == "note":
        return Msg(NOTE, text=m.note.text, ts=ts)
    return Msg("", ts=ts)


def fill_msg_pb(out: pb.Message, m: Msg) -> None:
    """Write ``m`` into ``out`` (e.g. ``resp.slice.add()``): building in place
    is several times faster than constructing and copying for long transcripts."""
    out.id = m.id
    out.ts_ms = m.ts
    kind = m.kind
    if kind == USER:
        body = out.user
        body.SetInParent()
        body.text = m.text
        if m.principal:
            body.principal = m.principal
    elif kind == ASSISTANT:
        body = out.assistant
        body.SetInParent()
        body.text = m.text
        if m.tool_calls:
            add = body.tool_calls.add
            for c in m.tool_calls:
                add(id=c.id, name=c.name, arguments_json=c.arguments_json)
    elif kind == TOOL:
        body = out.tool
        body.call_id = m.call_id
        body.name = m.name
        if m.content_json:
            body.json = m.content
        else:
            body.text = m.content
        body.is_error = m.is_error
    elif kind == SYSTEM:
        out.system.SetInParent()
        out.system.text = m.text
    else:
        out.note.SetInParent()
        out.note.text = m.text
    if m.native is not None:
        out.native.format = m.native.format
        out.native.data = m.native.data


def msg_to_pb(m: Msg) -> pb.Message:
    out = pb.Message()
    fill_msg_pb(out, m)
    return out


# -- record parts --------------------------------------------------------------------------
def info_to_pb(i: ContextInfo) -> pb.ContextInfo:
    return pb.ContextInfo(
        id=i.id,
        kind=_KIND_TO_PB.get(i.kind, pb.CONTEXT_KIND_UNSPECIFIED),
        version=i.version,
        turns=i.turns,
        est_tokens=i.est_tokens,
        updated_ms=i.updated,
        created_ms=i.created,
        message_count=i.message_count,
        model_window=i.model_window,
        archived=i.archived,
        incarnation=i.incarnation,
        forked_from=i.forked_from,
        forked_at_version=i.forked_at_version,
    )


def summary_to_pb(s) -> pb.Summary:
    return pb.Summary(
        goals=s.goals,
        decisions=s.decisions,
        open=s.open,
        facts=s.facts,
        narrative=s.narrative,
        covers_messages=s.covers_messages,
        updated_ms=s.updated_ms,
    )


def plan_to_pb(p) -> pb.Plan:
    items = []
    for item in p.items:
        bound = None
        if item.bound is not None:
            bound = pb.PlanBinding(
                kind=pb.BindingKind.Value(f"BINDING_KIND_{str(item.bound.kind).upper()}"),
                id=item.bound.id,
            )
        items.append(
            pb.PlanItem(
                id=item.id,
                title=item.title,
                detail=item.detail,
                status=pb.PlanItemStatus.Value(f"PLAN_ITEM_STATUS_{str(item.status).upper()}"),
                note=item.note,
                bound=bound,
            )
        )
    return pb.Plan(goal=p.goal, items=items, updated_ms=p.updated_ms)


def record_pb(r: CompactionInfo) -> pb.CompactionRecord:
    return pb.CompactionRecord(
        id=r.id,
        version=r.version,
        first_message_id=r.first_id,
        last_message_id=r.last_id,
        folded=r.folded,
        tokens_before=r.tokens_before,
        tokens_after=r.tokens_after,
        artifacts=r.artifacts,
        summariser=r.summariser,
        ts_ms=r.ts,
        expandable=r.expandable,
        fidelity=fidelity_pb(r.fidelity),
        folded_sha256=r.folded_sha256,
        cache_cost=cache_cost_pb(r),
    )


def fidelity_pb(f: Fidelity | None) -> pb.Fidelity | None:
    if f is None:
        return None
    return pb.Fidelity(
        artifacts=f.total,
        carried=f.carried,
        score=f.score,
        kinds=[pb.FidelityKind(kind=k.kind, artifacts=k.total, carried=k.carried) for k in f.kinds],
        dropped=[pb.DroppedArtifact(kind=k, text=t) for k, t in f.dropped],
        artifacts_since_start=f.seen_since_start,
        carried_since_start=f.since_start_score,
    )


def cache_pb(c: CacheEffect | None) -> pb.CacheEffect | None:
    if c is None:
        return None
    return pb.CacheEffect(
        tokens_saved=c.tokens_saved,
        prefix_tokens_kept=c.prefix_tokens_kept,
        tokens_rewritten=c.tokens_rewritten,
    )


def fill_context_pb(out: pb.Context, st: ContextState, page=None, compactions=()) -> None:
    """The whole record into ``out``; messages from ``page`` when paged."""
    out.MergeFrom(context_meta_pb(st))
    out.compactions.extend(record_pb(r) for r in compactions)
    add = out.messages.add
    for m in st.messages if page is None else page.messages:
        fill_msg_pb(add(), m)


def context_meta_pb(st: ContextState) -> pb.Context:
    """The record without its messages."""
    return pb.Context(
        id=st.id,
        kind=_KIND_TO_PB.get(st.kind, pb.CONTEXT_KIND_UNSPECIFIED),
        version=st.version,
        summary=summary_to_pb(st.summary),
        skills=[pb.SkillRef(name=s.name, hash=s.hash) for s in st.skills],
        plan=plan_to_pb(st.plan) if st.plan is not None else None,
        preflight_json=st.preflight,
        est_tokens=st.est_tokens,
        model_window=st.model_window,
        principal=st.principal,
        task=st.task,
        turns=st.turns,
        created_ms=st.created,
        updated_ms=st.updated,
        model=st.model,
        cache_usage=cache_usage_pb(st.calibration.cache) if st.calibration.cache.reports else None,
    )


def slice_blocks_pb(st: ContextState) -> list[pb.Message]:
    """The summary block and the plan block, as the slice's leading system messages."""
    out = []
    summary = st.summary.render()
    if summary:
        out.append(
            pb.Message(
                id="summary", ts_ms=st.summary.updated_ms, system=pb.SystemMessage(text=summary)
            )
        )
    if st.plan is not None:
        out.append(
            pb.Message(
                id="plan", ts_ms=st.plan.updated_ms, system=pb.SystemMessage(text=st.plan.render())
            )
        )
    return out


def fill_slice_pb(out, st: ContextState, page=None, blocks: bool = True) -> None:
    """Summary block, plan block (system messages, leading the first page,
    unless ``blocks`` is False), then the transcript (``page``'s messages
    when paged), appended to the repeated field ``out``."""
    if blocks and (page is None or page.first):
        summary = st.summary.render()
        if summary:
            out.add(
                id="summary", ts_ms=st.summary.updated_ms, system=pb.SystemMessage(text=summary)
            )
        if st.plan is not None:
            out.add(
                id="plan", ts_ms=st.plan.updated_ms, system=pb.SystemMessage(text=st.plan.render())
            )
    add = out.add
    for m in st.messages if page is None else page.messages:
        fill_msg_pb(add(), m)


# -- plan ----------------------------------------------------------------------------------
_STATUS_FROM_PB = {
    pb.PLAN_ITEM_STATUS_PENDING: PlanStatus.PENDING,
    pb.PLAN_ITEM_STATUS_IN_PROGRESS: PlanStatus.IN_PROGRESS,
    pb.PLAN_ITEM_STATUS_DONE: PlanStatus.DONE,
    pb.PLAN_ITEM_STATUS_BLOCKED: PlanStatus.BLOCKED,
    pb.PLAN_ITEM_STATUS_SKIPPED: PlanStatus.SKIPPED,
}
_BINDING_FROM_PB = {
    pb.BINDING_KIND_RUN: BindingKind.RUN,
    pb.BINDING_KIND_SUBAGENT: BindingKind.SUBAGENT,
    pb.BINDING_KIND_TASK: BindingKind.TASK,
}
OUTCOME_FROM_PB = {
    pb.RUN_OUTCOME_SUCCEEDED: RunOutcome.SUCCEEDED,
    pb.RUN_OUTCOME_FAILED: RunOutcome.FAILED,
    pb.RUN_OUTCOME_CANCELLED: RunOutcome.CANCELLED,
}


def binding_from_pb(b: pb.PlanBinding, field: str) -> Binding:
    kind = _BINDING_FROM_PB.get(b.kind)
    if kind is None:
        raise InvalidArgument(f"{field}.kind", "must be RUN, SUBAGENT or TASK")
    return Binding(kind, b.id)


def _spec(s: pb.PlanItemSpec) -> PlanItemSpec:
    return PlanItemSpec(title=s.title, detail=s.detail, id=s.id)


def plan_or_none_pb(plan) -> pb.Plan | None:
    return plan_to_pb(plan) if plan is not None else None


def known(table: dict, value: int, field: str, what: str):
    """``table[value]``, refused as an unknown ``what`` in ``field``."""
    out = table.get(value)
    if out is None:
        raise InvalidArgument(field, f"unknown {what} {value}")
    return out


def expected_version(request) -> int | None:
    return request.expected_version if request.HasField("expected_version") else None


def plan_edit_from_pb(request: pb.UpdatePlanRequest):
    """The request's operation as a function of (planner, plan), validated up front."""
    which = request.WhichOneof("op")
    if which == "create":
        c = request.create
        specs = [_spec(s) for s in c.items]
        return lambda planner, _plan: planner.create(c.goal, specs)
    if which == "update":
        u = request.update
        status = None
        if u.status != pb.PLAN_ITEM_STATUS_UNSPECIFIED:
            status = known(_STATUS_FROM_PB, u.status, "update.status", "plan item status")
        bind = binding_from_pb(u.bind, "update.bind") if u.HasField("bind") else None
        kwargs = {
            "status": status,
            "note": u.note if u.HasField("note") else None,
            "title": u.title if u.HasField("title") else None,
            "detail": u.detail if u.HasField("detail") else None,
            "bind": bind,
        }
        return lambda planner, plan: planner.update(plan, u.item_id, **kwargs)
    if which == "insert":
        i = request.insert
        if not i.HasField("item"):
            raise InvalidArgument("insert.item", "must describe the new item")
        spec = _spec(i.item)
        return lambda planner, plan: planner.insert(plan, spec, i.position)
    if which == "move":
        m = request.move
        return lambda planner, plan: planner.move(plan, m.item_id, m.position)
    if which == "clear":
        return lambda planner, plan: planner.clear(plan)
    raise InvalidArgument("op", "set one of create, update, insert, move or clear")


# -- compaction and events ------------------------------------------------------------------
_EVENT_KINDS = {
    "turn": pb.CONTEXT_EVENT_KIND_TURN,
    "compaction": pb.CONTEXT_EVENT_KIND_COMPACTION,
    "compaction_failed": pb.CONTEXT_EVENT_KIND_COMPACTION_FAILED,
    "plan": pb.CONTEXT_EVENT_KIND_PLAN,
    "skills": pb.CONTEXT_EVENT_KIND_SKILLS,
    "preflight": pb.CONTEXT_EVENT_KIND_PREFLIGHT,
    "deleted": pb.CONTEXT_EVENT_KIND_DELETED,
    "truncate": pb.CONTEXT_EVENT_KIND_TRUNCATED,
}


def event_pb(
    ev: WatchEvent, record: CompactionInfo | None = None
) -> pb.WatchContextResponse | None:
    kind = _EVENT_KINDS.get(ev.kind)
    if kind is None:
        return None
    return pb.WatchContextResponse(
        compaction=record_pb(record) if record is not None else None,
        context_id=ev.context_id,
        kind=kind,
        version=ev.version,
        ts_ms=ev.ts,
        tokens_before=ev.tokens_before,
        tokens_after=ev.tokens_after,
        folded=ev.folded,
        detail=ev.detail,
    )


def applied_pb(a: ApplyResult, record: CompactionInfo | None) -> pb.ApplyCompactionResponse:
    return pb.ApplyCompactionResponse(
        version=a.version,
        folded=a.folded,
        tokens_before=a.tokens_before,
        tokens_after=a.tokens_after,
        summary=summary_to_pb(a.summary),
        evicted_skills=a.evicted_skills,
        cache=cache_pb(a.cache),
        compaction=record_pb(record) if record is not None else None,
    )


# -- provider shapes (JSON) ------------------------------------------------------------------
FORMAT_FROM_PB = {
    pb.MESSAGE_FORMAT_UNSPECIFIED: "",
    pb.MESSAGE_FORMAT_CTXD: providers.CTXD,
    pb.MESSAGE_FORMAT_OPENAI: providers.OPENAI,
    pb.MESSAGE_FORMAT_ANTHROPIC: providers.ANTHROPIC,
    pb.MESSAGE_FORMAT_OPENAI_RESPONSES: providers.RESPONSES,
}


def turn_messages(request: pb.AppendTurnRequest) -> tuple[list[Msg], list[str] | None]:
    """The turn's messages from ``messages`` or ``messages_json`` (exactly one),
    with the JSON elements they came from (None for protobuf messages)."""
    if not request.messages_json:
        for name in ("format", "system_json"):
            if getattr(request, name):
                raise InvalidArgument(name, "goes with messages_json")
        return [msg_from_pb(m) for m in request.messages], None
    if request.messages:
        raise InvalidArgument("messages_json", "set either messages or messages_json")
    turn = turn_from_json(request)
    return turn.messages, turn.origins


def turn_from_json(request: pb.AppendTurnRequest) -> providers.Turn:
    """``messages_json`` in ``request.format`` as domain messages (with origins)."""
    fmt = FORMAT_FROM_PB.get(request.format)
    if not fmt:
        raise InvalidArgument(
            "format", "say the shape of messages_json: CTXD, OPENAI, ANTHROPIC or OPENAI_RESPONSES"
        )
    if fmt != providers.CTXD:
        return providers.parse_turn(fmt, request.messages_json, request.system_json)
    if request.system_json:
        raise InvalidArgument("system_json", "goes with MESSAGE_FORMAT_ANTHROPIC")
    items = parse_json(request.messages_json, field="messages_json")
    if not isinstance(items, list):
        raise InvalidArgument("messages_json", "must be a JSON array of Message")
    turn = providers.Turn([], [])
    # Parsed again by protobuf's own reader, which keeps its numbers exact.
    for i, item in enumerate(json.loads(request.messages_json)):
        if not isinstance(item, dict):
            raise InvalidArgument(f"messages_json[{i}]", "must be a JSON object (a Message)")
        m = pb.Message()
        try:
            json_format.ParseDict(item, m)
        except (json_format.ParseError, TypeError, ValueError, AttributeError) as exc:
            raise InvalidArgument(f"messages_json[{i}]", str(exc)) from None
        turn.add(msg_from_pb(m), f"messages_json[{i}]")
    return turn


def slice_json(
    fmt: str, st: ContextState, page, cache_breakpoint: bool, *, blocks: bool = True
) -> tuple[str, str]:
    """``(messages_json, system_json)`` of one slice page in ``fmt``."""
    if fmt != providers.CTXD:
        return providers.render_slice(
            fmt, st, page.messages, first=page.first and blocks, cache_breakpoint=cache_breakpoint
        )
    holder = pb.GetContextResponse()
    fill_slice_pb(holder.slice, st, page, blocks)
    items = [json_format.MessageToDict(m) for m in holder.slice]
    return json.dumps(items, ensure_ascii=False, separators=(",", ":")), ""


def messages_json(fmt: str, msgs: list[Msg]) -> str:
    """``msgs`` (no summary or plan blocks) as a JSON array in ``fmt``."""
    if fmt != providers.CTXD:
        return providers.render_messages(fmt, msgs)
    items = [json_format.MessageToDict(msg_to_pb(m)) for m in msgs]
    return json.dumps(items, ensure_ascii=False, separators=(",", ":"))
