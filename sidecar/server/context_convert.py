"""Protobuf <-> domain conversions for ``ctxd.v1.ContextService`` messages.

Shared by the servicer and its RPC mixins; no rules live here.
"""

from __future__ import annotations

from sidecar.api.ctxd.v1 import context_pb2
from sidecar.core.contexts.model import (
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
    ToolCall,
)

pb = context_pb2

_KIND_TO_PB = {ROOT: pb.CONTEXT_KIND_ROOT, CONVERSATION: pb.CONTEXT_KIND_CONVERSATION}
_KIND_FROM_PB = {
    pb.CONTEXT_KIND_UNSPECIFIED: "",
    pb.CONTEXT_KIND_ROOT: ROOT,
    pb.CONTEXT_KIND_CONVERSATION: CONVERSATION,
}


# -- messages ----------------------------------------------------------------------------
def msg_from_pb(m: pb.Message) -> Msg:
    """A request message as a domain message (kind "" when none is set; the
    domain rejects it with the field named)."""
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


def fill_context_pb(out: pb.Context, st: ContextState) -> None:
    out.MergeFrom(context_meta_pb(st))
    add = out.messages.add
    for m in st.messages:
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
    )


def fill_slice_pb(out, st: ContextState) -> None:
    """Summary block, plan block (system messages), then the transcript,
    appended to the repeated field ``out``."""
    summary = st.summary.render()
    if summary:
        out.add(id="summary", ts_ms=st.summary.updated_ms, system=pb.SystemMessage(text=summary))
    if st.plan is not None:
        out.add(id="plan", ts_ms=st.plan.updated_ms, system=pb.SystemMessage(text=st.plan.render()))
    add = out.add
    for m in st.messages:
        fill_msg_pb(add(), m)
