"""Anthropic messages: the ``system`` and ``messages`` arguments of ``messages.create``.

In: ``system`` (``AppendTurnRequest.system_json``: a string or text blocks)
becomes ctxd system messages leading the turn, one per block. Then each
element of ``messages``, content a string or blocks:

* user ``text`` blocks → one user message each; ``tool_result`` blocks →
  tool results (``tool_use_id``, ``is_error``; content a string or text
  blocks joined with ``"\\n"``; the name comes from the call in the same
  turn);
* assistant ``text`` blocks → one assistant message each, the last text
  before the ``tool_use`` blocks carrying them as tool calls (``input``
  kept as JSON text, numbers as written); text after a ``tool_use`` in the
  same message joins that text (it comes back before the calls);
* ``cache_control`` is accepted and not kept; images, documents, thinking
  and server-tool blocks are refused (ctxd keeps text and tool calls).

Out, a ready request:

* ``system``: text blocks — the summary and plan blocks (first page), then
  every ctxd system message of the page (Anthropic has no system role in
  ``messages``). When the page opens with an assistant message (a
  round-boundary compaction), the summary becomes a user-role preamble
  instead (:func:`ctxd_sidecar.core.compaction.cut.place_summary`); a first page
  opening with an assistant message and no summary gets that preamble's
  head line alone, since the first message must be a user message.
* ``messages``: roles alternate (consecutive same-role messages merge into
  one message of several blocks; content is always a block list); each
  tool result is a ``tool_result`` block in the user message right after
  the assistant message with its ``tool_use`` (:func:`~.common.paired`);
  notes are user text prefixed ``[note] ``; empty or blank texts are left
  out (Anthropic refuses them).
* ``cache_breakpoint``: ``cache_control: {"type": "ephemeral"}`` on the
  last block of the stable prefix — the last ``system`` block, or the user
  preamble when the summary went there.
* A tool call's ``input`` must be an object: stored arguments that are
  empty go out as ``{}``, other non-objects as ``{"value": ...}``.
"""

from __future__ import annotations

from typing import Any

from ctxd_sidecar.core.compaction.cut import USER_PREAMBLE_HEAD, place_summary
from ctxd_sidecar.core.contexts.model import ASSISTANT, NOTE, SYSTEM, TOOL, USER, Msg, ToolCall
from ctxd_sidecar.core.errors import InvalidArgument
from ctxd_sidecar.core.jsonvalue import MAX_DEPTH
from ctxd_sidecar.core.providers.common import (
    NOTE_PREFIX,
    Turn,
    dumps,
    loads,
    obj,
    objects,
    paired,
    text_of,
)

_EPHEMERAL = {"type": "ephemeral"}


def _block_type(b: dict[str, Any], field: str, allowed: tuple[str, ...]) -> str:
    t = b.get("type")
    if t not in allowed:
        raise InvalidArgument(
            f"{field}.type",
            f"{t!r} blocks are not kept here; ctxd keeps {', '.join(allowed)} blocks",
        )
    return t


def _texts(value: Any, field: str) -> list[str]:
    """A string or a list of text blocks, as texts."""
    if isinstance(value, str):
        return [text_of(value, field)]
    out = []
    for bf, b in objects(value, field):
        _block_type(b, bf, ("text",))
        out.append(text_of(b.get("text"), f"{bf}.text", required=True))
    return out


def _user(turn: Turn, content: Any, f: str, names: dict[str, str]) -> None:
    if isinstance(content, str):
        turn.add(Msg(USER, text=content), f)
        return
    for bf, b in objects(content, f"{f}.content"):
        if _block_type(b, bf, ("text", "tool_result")) == "text":
            turn.add(Msg(USER, text=text_of(b.get("text"), f"{bf}.text", required=True)), bf)
            continue
        call_id = text_of(b.get("tool_use_id"), f"{bf}.tool_use_id", required=True)
        raw = b.get("content")
        content_text = "" if raw is None else "\n".join(_texts(raw, f"{bf}.content"))
        is_error = b.get("is_error")
        if is_error is not None and not isinstance(is_error, bool):
            raise InvalidArgument(f"{bf}.is_error", "must be true or false")
        turn.add(
            Msg(
                TOOL,
                call_id=call_id,
                name=names.get(call_id, ""),
                content=content_text,
                is_error=bool(is_error),
            ),
            bf,
        )


def _assistant(turn: Turn, content: Any, f: str, names: dict[str, str]) -> None:
    if isinstance(content, str):
        turn.add(Msg(ASSISTANT, text=content), f)
        return
    before: list[tuple[str, str]] = []  # (text, origin) before the first tool_use
    after: list[str] = []
    calls: list[ToolCall] = []
    call_origin = ""
    for bf, b in objects(content, f"{f}.content"):
        if _block_type(b, bf, ("text", "tool_use")) == "text":
            text = text_of(b.get("text"), f"{bf}.text", required=True)
            (after.append(text) if calls else before.append((text, bf)))
            continue
        call_id = text_of(b.get("id"), f"{bf}.id", required=True)
        name = text_of(b.get("name"), f"{bf}.name", required=True)
        if not call_id or not name:
            raise InvalidArgument(f"{bf}.{'name' if call_id else 'id'}", "is required")
        calls.append(ToolCall(call_id, name, dumps(obj(b.get("input"), f"{bf}.input"))))
        names[call_id] = name
        call_origin = call_origin or bf
    if not calls:
        for text, origin in before:
            turn.add(Msg(ASSISTANT, text=text), origin)
        return
    for text, origin in before[:-1]:
        turn.add(Msg(ASSISTANT, text=text), origin)
    lead = [before[-1][0]] if before else []
    origin = before[-1][1] if before else call_origin
    turn.add(Msg(ASSISTANT, text="\n\n".join(lead + after), tool_calls=tuple(calls)), origin)


def from_anthropic(
    items: Any,
    system: Any = None,
    *,
    field: str = "messages_json",
    system_field: str = "system_json",
    max_depth: int = MAX_DEPTH,
) -> Turn:
    """``system`` (parsed ``system_json``, or None) and the ``messages``
    elements as ctxd messages."""
    turn = Turn([], [])
    if system is not None:
        for j, text in enumerate(_texts(system, system_field)):
            turn.add(Msg(SYSTEM, text=text), f"{system_field}[{j}]")
    names: dict[str, str] = {}
    for f, d in objects(items, field):
        role = d.get("role")
        content = d.get("content")
        if role == "user":
            _user(turn, content, f, names)
        elif role == "assistant":
            _assistant(turn, content, f, names)
        else:
            raise InvalidArgument(f"{f}.role", f"is {role!r}; expected user or assistant")
    return turn


def _input(arguments_json: str) -> Any:
    if not arguments_json:
        return {}
    value = loads(arguments_json, field="arguments_json")
    return value if isinstance(value, dict) else {"value": value}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def to_anthropic(
    msgs: list[Msg],
    *,
    summary: str = "",
    plan: str = "",
    first: bool = True,
    cache_breakpoint: bool = False,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(system, messages)`` for ``messages.create`` (``summary``/``plan``:
    the blocks, given for the first page only)."""
    system: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = []

    def push(role: str, block: dict[str, Any]) -> None:
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].append(block)
        else:
            messages.append({"role": role, "content": [block]})

    placement, summary_text = place_summary(summary if summary.strip() else "", msgs, "anthropic")
    preamble = None
    if summary_text and placement == "system":
        system.append(_text(summary_text))
    if plan.strip():
        system.append(_text(plan))
    if summary_text and placement == "user_preamble":
        preamble = _text(summary_text)
        push("user", preamble)
    for m in paired(msgs):
        if m.kind == SYSTEM:
            if m.text.strip():
                system.append(_text(m.text))
        elif m.kind in (USER, NOTE):
            text = m.text if m.kind == USER else NOTE_PREFIX + m.text
            if text.strip():
                push("user", _text(text))
        elif m.kind == ASSISTANT:
            if m.text.strip():
                push("assistant", _text(m.text))
            for c in m.tool_calls:
                block = {"type": "tool_use", "id": c.id, "name": c.name}
                push("assistant", block | {"input": _input(c.arguments_json)})
        elif m.kind == TOOL:
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": m.call_id}
            if m.content:
                block["content"] = m.content
            if m.is_error:
                block["is_error"] = True
            push("user", block)
    if first and messages and messages[0]["role"] == "assistant":
        messages.insert(0, {"role": "user", "content": [_text(USER_PREAMBLE_HEAD)]})
    if cache_breakpoint:
        target = preamble if preamble is not None else (system[-1] if system else None)
        if target is not None:
            target["cache_control"] = dict(_EPHEMERAL)
    return system, messages
