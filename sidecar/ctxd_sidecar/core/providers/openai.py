"""OpenAI chat completions: the ``messages`` argument of ``chat.completions.create``.

In (one element each, in order):

* ``system`` / ``developer`` → a ctxd system message (``developer`` comes
  back as ``system``); ``user`` → a user message (``name`` becomes the
  principal); content is a string or text parts, joined with ``"\\n"``.
  Image, audio, file and refusal parts are refused: ctxd keeps text.
* ``assistant`` → an assistant message: ``content`` (string, text parts or
  null) and ``tool_calls`` of ``type: "function"`` with ``id``,
  ``function.name`` and ``function.arguments`` — JSON text, checked by the
  one JSON rule and kept byte for byte. ``refusal``, ``audio`` and the
  deprecated ``function_call`` are refused when set.
* ``tool`` → a tool result (``tool_call_id``; content a string or text
  parts, kept as text; the name comes from the call in the same turn).
  The deprecated ``function`` role is refused.

Out, the slice as a ready ``messages`` argument: the summary and plan
blocks as ``system`` messages first (first page), then the transcript;
assistant tool calls as ``tool_calls`` with ``type: "function"`` (arguments
as stored; none as ``"{}"``); results as ``role: "tool"`` right behind their
call (:func:`~.common.paired`); ``is_error`` has no OpenAI field and is
dropped; note messages as ``user`` messages prefixed ``[note] ``; a
principal as ``name`` when it fits OpenAI's pattern.
"""

from __future__ import annotations

import re
from typing import Any

from ctxd_sidecar.core.contexts.model import ASSISTANT, NOTE, SYSTEM, TOOL, USER, Msg, ToolCall
from ctxd_sidecar.core.errors import InvalidArgument
from ctxd_sidecar.core.jsonvalue import MAX_DEPTH, parse_json
from ctxd_sidecar.core.providers.common import (
    NOTE_PREFIX,
    Turn,
    obj,
    objects,
    paired,
    refuse_set,
    text_of,
)

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_ROLES = ("system", "developer", "user", "assistant", "tool")


def _content(value: Any, field: str) -> str:
    """A string or an array of ``{"type": "text", "text": ...}`` parts."""
    if value is None or isinstance(value, str):
        return text_of(value, field)
    texts = []
    for pf, p in objects(value, field):
        if p.get("type") != "text":
            raise InvalidArgument(
                f"{pf}.type", f"{p.get('type')!r} parts are not kept; ctxd keeps text parts only"
            )
        texts.append(text_of(p.get("text"), f"{pf}.text", required=True))
    return "\n".join(texts)


def _calls(value: Any, field: str, max_depth: int) -> tuple[ToolCall, ...]:
    if value is None:
        return ()
    out = []
    for cf, c in objects(value, field):
        if c.get("type", "function") != "function":
            raise InvalidArgument(f"{cf}.type", "only function tool calls are kept")
        fn = obj(c.get("function"), f"{cf}.function")
        args = text_of(fn.get("arguments"), f"{cf}.function.arguments")
        if args:
            parse_json(args, field=f"{cf}.function.arguments", max_depth=max_depth)
        call_id = text_of(c.get("id"), f"{cf}.id", required=True)
        if not call_id:
            raise InvalidArgument(f"{cf}.id", "is required (the provider's call id)")
        name = text_of(fn.get("name"), f"{cf}.function.name", required=True)
        if not name:
            raise InvalidArgument(f"{cf}.function.name", "is required (the tool's name)")
        out.append(ToolCall(call_id, name, args))
    return tuple(out)


def from_openai(items: Any, *, field: str = "messages_json", max_depth: int = MAX_DEPTH) -> Turn:
    """The elements of a chat-completions ``messages`` array as ctxd messages."""
    turn = Turn([], [])
    names: dict[str, str] = {}
    for f, d in objects(items, field):
        role = d.get("role")
        if role not in _ROLES:
            raise InvalidArgument(f"{f}.role", f"is {role!r}; expected one of {', '.join(_ROLES)}")
        if role in ("system", "developer"):
            turn.add(Msg(SYSTEM, text=_content(d.get("content"), f"{f}.content")), f)
        elif role == "user":
            text = _content(d.get("content"), f"{f}.content")
            turn.add(Msg(USER, text=text, principal=text_of(d.get("name"), f"{f}.name")), f)
        elif role == "assistant":
            refuse_set(d, ("refusal", "audio", "function_call"), f, "is not kept by ctxd")
            calls = _calls(d.get("tool_calls"), f"{f}.tool_calls", max_depth)
            names.update((c.id, c.name) for c in calls)
            text = _content(d.get("content"), f"{f}.content")
            turn.add(Msg(ASSISTANT, text=text, tool_calls=calls), f)
        else:
            call_id = text_of(d.get("tool_call_id"), f"{f}.tool_call_id", required=True)
            content = _content(d.get("content"), f"{f}.content")
            turn.add(Msg(TOOL, call_id=call_id, name=names.get(call_id, ""), content=content), f)
    return turn


def _out(m: Msg) -> dict[str, Any]:
    if m.kind == SYSTEM:
        return {"role": "system", "content": m.text}
    if m.kind == USER:
        d: dict[str, Any] = {"role": "user", "content": m.text}
        if m.principal and _NAME.match(m.principal):
            d["name"] = m.principal
        return d
    if m.kind == ASSISTANT:
        d = {"role": "assistant", "content": m.text if m.text or not m.tool_calls else None}
        if m.tool_calls:
            d["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments_json or "{}"},
                }
                for c in m.tool_calls
            ]
        return d
    if m.kind == TOOL:
        return {"role": "tool", "tool_call_id": m.call_id, "content": m.content}
    if m.kind == NOTE:
        return {"role": "user", "content": NOTE_PREFIX + m.text}
    raise ValueError(f"unknown message kind {m.kind!r}")


def to_openai(msgs: list[Msg], blocks: list[str] = ()) -> list[dict[str, Any]]:
    """``blocks`` (summary, plan: first page only) and ``msgs`` as a
    chat-completions ``messages`` array."""
    out = [{"role": "system", "content": b} for b in blocks]
    out.extend(_out(m) for m in paired(msgs))
    return out
