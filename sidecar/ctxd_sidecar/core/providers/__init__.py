"""Provider message shapes, so no runtime hand-converts its transcript.

A turn may arrive, and a slice may be read, in a provider's own JSON shape:
:data:`OPENAI` (chat completions, :mod:`.openai`), :data:`ANTHROPIC`
(messages, :mod:`.anthropic`) or :data:`RESPONSES` (Responses API input
items, kept exactly: :mod:`.responses`); :data:`CTXD` is ctxd's own ``Message`` in
its protobuf JSON form (handled by the gRPC adapter, which owns protobuf).
Each module says the provider rules it encodes; nothing here knows gRPC.
"""

from __future__ import annotations

from dataclasses import replace

from ctxd_sidecar.core.contexts.model import ContextState, Msg
from ctxd_sidecar.core.errors import InvalidArgument
from ctxd_sidecar.core.jsonvalue import MAX_DEPTH
from ctxd_sidecar.core.providers.anthropic import from_anthropic, to_anthropic
from ctxd_sidecar.core.providers.common import Turn, dumps, loads, relabel
from ctxd_sidecar.core.providers.ids import IdMap, id_map, original
from ctxd_sidecar.core.providers.openai import from_openai, to_openai
from ctxd_sidecar.core.providers.responses import (
    NATIVE_FORMAT,
    from_responses,
    item_texts,
    to_responses_json,
)

CTXD, OPENAI, ANTHROPIC, RESPONSES = "ctxd", "openai", "anthropic", "openai_responses"
FORMATS = (CTXD, OPENAI, ANTHROPIC, RESPONSES)
#: Native payload formats ctxd writes and reads back itself (any other
#: format a writer names is kept byte for byte and never read).
NATIVE_FORMATS = (NATIVE_FORMAT,)

__all__ = [
    "ANTHROPIC",
    "CTXD",
    "FORMATS",
    "NATIVE_FORMATS",
    "OPENAI",
    "RESPONSES",
    "Turn",
    "parse_turn",
    "relabel",
    "join_units",
    "render_parts",
    "render_slice",
]


def parse_turn(
    fmt: str, messages_json: str, system_json: str = "", *, max_depth: int = MAX_DEPTH
) -> Turn:
    """A turn sent as provider JSON, as ctxd messages (with their origins)."""
    items = loads(messages_json, field="messages_json", max_depth=max_depth)
    if fmt == OPENAI:
        if system_json:
            raise InvalidArgument(
                "system_json", "goes with MESSAGE_FORMAT_ANTHROPIC; OpenAI system text is a message"
            )
        return _kept_ids(from_openai(items, max_depth=max_depth))
    if fmt == RESPONSES:
        if system_json:
            raise InvalidArgument(
                "system_json",
                "goes with MESSAGE_FORMAT_ANTHROPIC; Responses system text is an item",
            )
        return from_responses(items, max_depth=max_depth)
    if fmt == ANTHROPIC:
        system = (
            loads(system_json, field="system_json", max_depth=max_depth) if system_json else None
        )
        return _kept_ids(from_anthropic(items, system, max_depth=max_depth))
    raise InvalidArgument("format", f"{fmt!r} has no provider converter")


def _kept_ids(turn: Turn) -> Turn:
    """Ids a read mapped (:mod:`.ids`) back to the ones ctxd keeps."""
    for i, m in enumerate(turn.messages):
        if m.tool_calls:
            calls = tuple(replace(c, id=original(c.id)) for c in m.tool_calls)
            if calls != m.tool_calls:
                turn.messages[i] = replace(m, tool_calls=calls)
        elif m.call_id and original(m.call_id) != m.call_id:
            turn.messages[i] = replace(m, call_id=original(m.call_id))
    return turn


def render_parts(
    fmt: str,
    st: ContextState,
    msgs: list[Msg],
    *,
    ids: IdMap | None,
    blocks: bool = True,
    cache_breakpoint: bool = False,
) -> tuple[str, list[str], list[str]]:
    """``(system_json, units, roles)`` of the view ``msgs`` of ``st`` in
    ``fmt`` (the whole view: the summary and plan blocks lead it unless
    ``blocks`` is False), call ids from ``ids``. A unit is one message's
    JSON (OpenAI; ``roles`` empty), one Responses input item (Responses,
    whose items keep their ids: ``ids`` None) or, for Anthropic, the JSON of
    one user block or of a whole assistant message's blocks, comma-joined
    (consecutive user units form one message, which a page boundary may
    split: clients merge a user message continued across pages)."""
    summary = st.summary.render() if blocks else ""
    plan = st.plan.render() if blocks and st.plan is not None else ""
    if fmt == RESPONSES:
        return "", item_texts(msgs, [b for b in (summary, plan) if b]), []
    if ids is None:
        raise ValueError(f"{fmt!r} maps call ids: pass its IdMap")
    msgs = ids.apply(msgs)
    if fmt == OPENAI:
        return "", [dumps(m) for m in to_openai(msgs, [b for b in (summary, plan) if b])], []
    if fmt == ANTHROPIC:
        system, messages = to_anthropic(
            msgs, summary=summary, plan=plan, first=True, cache_breakpoint=cache_breakpoint
        )
        units, roles = [], []
        for m in messages:
            if m["role"] == "user":
                units.extend(dumps(b) for b in m["content"])
                roles.extend("user" for _ in m["content"])
            else:
                units.append(",".join(dumps(b) for b in m["content"]))
                roles.append(m["role"])
        return (dumps(system) if system else ""), units, roles
    raise InvalidArgument("format", f"{fmt!r} has no provider converter")


def join_units(units: list[str], roles: list[str]) -> str:
    """A ``messages`` JSON array of ``units`` (see :func:`render_parts`)."""
    if not roles:
        return "[" + ",".join(units) + "]"
    out: list[str] = []
    i = 0
    while i < len(units):
        j = i + 1
        while j < len(units) and roles[j] == roles[i] == "user":
            j += 1
        out.append(f'{{"role":"{roles[i]}","content":[{",".join(units[i:j])}]}}')
        i = j
    return "[" + ",".join(out) + "]"


def render_messages(fmt: str, msgs: list[Msg]) -> str:
    """``msgs`` alone (no blocks) as a JSON array in a provider format."""
    if fmt == RESPONSES:
        return to_responses_json(msgs)
    if fmt == OPENAI:
        return dumps(to_openai(msgs))
    if fmt == ANTHROPIC:
        return dumps(to_anthropic(msgs, summary="", plan="", first=False)[1])
    raise InvalidArgument("format", f"{fmt!r} has no provider converter")


def render_slice(
    fmt: str,
    st: ContextState,
    msgs: list[Msg],
    *,
    first: bool,
    cache_breakpoint: bool = False,
) -> tuple[str, str]:
    """``(messages_json, system_json)`` of one slice page of ``st`` in
    ``fmt`` (``system_json`` is "" for OpenAI, whose system text is in the
    messages, and when Anthropic's system is empty). The summary and plan
    blocks lead the first page only. Call ids are mapped over ``msgs``
    alone (:mod:`.ids`); reads of a context use :mod:`.pages`."""
    if fmt in (OPENAI, ANTHROPIC):
        msgs = id_map(msgs, fmt).apply(msgs)
    summary = st.summary.render() if first else ""
    plan = st.plan.render() if first and st.plan is not None else ""
    if fmt == OPENAI:
        blocks = [b for b in (summary, plan) if b]
        return dumps(to_openai(msgs, blocks)), ""
    if fmt == RESPONSES:
        return to_responses_json(msgs, [b for b in (summary, plan) if b]), ""
    if fmt == ANTHROPIC:
        system, messages = to_anthropic(
            msgs, summary=summary, plan=plan, first=first, cache_breakpoint=cache_breakpoint
        )
        return dumps(messages), dumps(system) if system else ""
    raise InvalidArgument("format", f"{fmt!r} has no provider converter")
