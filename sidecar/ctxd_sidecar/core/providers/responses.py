"""OpenAI Responses API input items: the ``input`` argument of ``responses.create``.

The Agents SDK (and anything built on the Responses API) keeps a session as
a list of these items, and needs every one back exactly as it was added:
reasoning items with ``encrypted_content``, hosted-tool and MCP calls,
images, item ids. ctxd keeps each item twice: its own projection (what
compaction, token estimates and the other formats read) and the item
itself as the message's native form (format :data:`NATIVE_FORMAT`), written
back byte for byte on the way out.

In (one element each, in order), the projection:

* ``message`` items (``type`` "message" or absent, with a ``role``):
  user → user, assistant → assistant, system/developer → system; the text
  is the string content or the text parts (``input_text``, ``output_text``,
  ``text``, ``refusal``) joined with ``"\\n"``; images, files and audio are
  kept in the item and projected as ``[image]``, ``[file NAME]``,
  ``[audio]``.
* ``function_call`` → an assistant message with one tool call
  (``call_id``, ``name``, ``arguments``: JSON text, checked as every tool
  call's arguments are).
* ``function_call_output`` → the tool result of ``call_id`` (``output``
  as text; a list of output parts as their JSON text).
* Everything else (``reasoning``, ``compaction``, ``web_search_call``,
  ``computer_call``, ``mcp_call``, ``item_reference``, ...) → a note
  ``[TYPE] TEXT`` with the readable text the item has (a reasoning
  summary, a tool's name, a call's status).

Out: items stored from this format come back as stored, in transcript
order (not re-paired: an SDK gets its list back); other messages are
converted: system → ``{"role": "system"}``, user and notes (prefixed
``[note] ``) → ``{"role": "user"}``, assistant text → ``{"role":
"assistant"}`` then one ``function_call`` per tool call, results →
``function_call_output``. The summary and plan blocks lead the first page
as ``system`` messages.

Native payloads of format :data:`NATIVE_FORMAT` sent in ctxd's own shape
(``Message.native``) are checked by :func:`check_native` before anything is
stored: a Responses read returns them in their message's place, so each
must be one item standing for that message (the table above, read
backwards). A stored item that fails the check (written before it
existed) is read as ctxd's conversion of its message instead, so one bad
item never breaks a whole read.
"""

from __future__ import annotations

from typing import Any

from ctxd_sidecar.core.contexts.model import (
    ASSISTANT,
    NOTE,
    SYSTEM,
    TOOL,
    USER,
    Msg,
    Native,
    ToolCall,
)
from ctxd_sidecar.core.errors import InvalidArgument
from ctxd_sidecar.core.jsonvalue import MAX_DEPTH
from ctxd_sidecar.core.providers.common import (
    NOTE_PREFIX,
    Num,
    Turn,
    array,
    dumps,
    loads,
    loads_stored,
    objects,
    text_of,
)

#: Native.format of a stored Responses input item.
NATIVE_FORMAT = "openai.responses.item"
_ROLES = {"user": USER, "assistant": ASSISTANT, "system": SYSTEM, "developer": SYSTEM}
_TEXT_PARTS = ("input_text", "output_text", "text", "refusal", "summary_text", "reasoning_text")
#: Readable fields a note about an item quotes, in this order.
_NOTE_FIELDS = ("name", "server_label", "status", "action", "query", "queries", "code", "output")
_NOTE_CHARS = 2000


def _part_text(p: Any) -> str:
    if not isinstance(p, dict):
        return ""
    kind = p.get("type")
    if kind in _TEXT_PARTS:
        value = p.get("refusal") if kind == "refusal" else p.get("text")
        return value if isinstance(value, str) else ""
    if kind == "input_image":
        return "[image]"
    if kind == "input_file":
        name = p.get("filename")
        return f"[file {name}]" if isinstance(name, str) and name else "[file]"
    if kind == "input_audio":
        return "[audio]"
    return f"[{kind}]" if isinstance(kind, str) else ""


def _content_text(value: Any, field: str) -> str:
    if value is None or isinstance(value, str):
        return text_of(value, field)
    parts = array(value, field)
    return "\n".join(t for t in (_part_text(p) for p in parts) if t)


def _note_text(kind: str, d: dict[str, Any]) -> str:
    """``[TYPE] what the item says`` (reasoning summary, tool name, status)."""
    bits: list[str] = []
    summary = d.get("summary")
    if isinstance(summary, list):
        bits += [t for t in (_part_text(p) for p in summary) if t]
    content = d.get("content")
    if isinstance(content, list):
        bits += [t for t in (_part_text(p) for p in content) if t]
    for name in _NOTE_FIELDS:
        value = d.get(name)
        if isinstance(value, str) and value:
            bits.append(f"{name}: {value}")
        elif isinstance(value, dict | list) and value:
            bits.append(f"{name}: {dumps(value)}")
    text = f"[{kind}] " + "; ".join(bits) if bits else f"[{kind}]"
    return text[:_NOTE_CHARS]


def from_responses(items: Any, *, field: str = "messages_json", max_depth: int = MAX_DEPTH) -> Turn:
    """Responses input items as ctxd messages, each carrying its item as native."""
    turn = Turn([], [])
    names: dict[str, str] = {}
    for f, d in objects(items, field):
        native = Native(NATIVE_FORMAT, dumps(d).encode())
        kind = d.get("type")
        if kind is not None and not isinstance(kind, str) or isinstance(kind, Num):
            raise InvalidArgument(f"{f}.type", "must be a string")
        if kind in (None, "message"):
            role = d.get("role")
            if not _is_role(role):
                raise InvalidArgument(
                    f"{f}.role", f"is {_short(role)}; expected one of {', '.join(_ROLES)}"
                )
            text = _content_text(d.get("content"), f"{f}.content")
            turn.add(Msg(_ROLES[role], text=text, native=native), f)
        elif kind == "function_call":
            call_id = text_of(d.get("call_id"), f"{f}.call_id", required=True)
            if not call_id:
                raise InvalidArgument(f"{f}.call_id", "is required (the provider's call id)")
            name = text_of(d.get("name"), f"{f}.name", required=True)
            args = text_of(d.get("arguments"), f"{f}.arguments")
            names[call_id] = name
            call = ToolCall(call_id, name, args)
            turn.add(Msg(ASSISTANT, tool_calls=(call,), native=native), f)
        elif kind == "function_call_output":
            call_id = text_of(d.get("call_id"), f"{f}.call_id", required=True)
            output = d.get("output")
            content = output if isinstance(output, str) else dumps(output)
            name = names.get(call_id, "")
            turn.add(Msg(TOOL, call_id=call_id, name=name, content=content, native=native), f)
        else:
            turn.add(Msg(NOTE, text=_note_text(kind, d), native=native), f)
    return turn


def _out(m: Msg) -> list[dict[str, Any]]:
    if m.kind == SYSTEM:
        return [{"role": "system", "content": m.text}]
    if m.kind == USER:
        return [{"role": "user", "content": m.text}]
    if m.kind == NOTE:
        return [{"role": "user", "content": NOTE_PREFIX + m.text}]
    if m.kind == ASSISTANT:
        out: list[dict[str, Any]] = []
        if m.text or not m.tool_calls:
            out.append({"role": "assistant", "content": m.text})
        out += [
            {
                "type": "function_call",
                "call_id": c.id,
                "name": c.name,
                "arguments": c.arguments_json or "{}",
            }
            for c in m.tool_calls
        ]
        return out
    if m.kind == TOOL:
        return [{"type": "function_call_output", "call_id": m.call_id, "output": m.content}]
    raise ValueError(f"unknown message kind {m.kind!r}")


def _is_role(value: Any) -> bool:
    return isinstance(value, str) and not isinstance(value, Num) and value in _ROLES


def _short(value: Any) -> str:
    text = str(value) if isinstance(value, Num) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _stands_for(d: dict[str, Any], field: str) -> tuple[str, str]:
    """(the message kind the item ``d`` stands for, its type: "message" for
    a message item)."""
    kind = d.get("type")
    if kind is not None and not isinstance(kind, str) or isinstance(kind, Num):
        raise InvalidArgument(field, '"type" must be a string')
    if kind in (None, "message"):
        role = d.get("role")
        if not _is_role(role):
            raise InvalidArgument(
                field,
                f"is a message item with role {_short(role)}; expected one of {', '.join(_ROLES)}",
            )
        return _ROLES[role], "message"
    if kind == "function_call":
        return ASSISTANT, kind
    if kind == "function_call_output":
        return TOOL, kind
    return NOTE, kind


def _same(d: dict[str, Any], key: str, want: str, field: str, what: str) -> None:
    value = d.get(key)
    if key == "arguments" and value is None:
        value = ""  # as the projection reads a function_call without arguments
    if not isinstance(value, str) or isinstance(value, Num) or value != want:
        raise InvalidArgument(
            field, f'has "{key}" {_short(value)}, but the message\'s {what} is {_short(want)}'
        )


def check_native(m: Msg, field: str, *, stored: bool = False) -> str:
    """``m.native`` (format :data:`NATIVE_FORMAT`) checked against ``m``, as
    text: UTF-8 JSON of one item that stands for ``m``'s kind (and, for a
    call or its output, the same call), since a Responses read returns it in
    ``m``'s place. Raises :class:`InvalidArgument` naming ``field``.
    ``stored``: read back, so parsed once, without the JSON rule's checks."""
    try:
        text = m.native.data.decode()
    except UnicodeDecodeError as exc:
        raise InvalidArgument(
            field,
            f"is not UTF-8 (byte {exc.start}); an {NATIVE_FORMAT} payload is the JSON text "
            "of one Responses input item",
        ) from None
    if not stored:
        d = loads(text, field=field, max_depth=MAX_DEPTH)
    else:
        try:
            d = loads_stored(text)
        except ValueError:
            raise InvalidArgument(field, "is not JSON") from None
    if not isinstance(d, dict):
        raise InvalidArgument(field, "must be one JSON object (a Responses input item)")
    kind, item = _stands_for(d, field)
    if kind != m.kind:
        what = f"a {d.get('role')} message" if item == "message" else f"a {item[:60]}"
        raise InvalidArgument(
            field,
            f"is {what} item, which stands for a {kind} message, but the message is {m.kind} "
            "(a Responses read returns the item in the message's place)",
        )
    if item == "function_call":
        if len(m.tool_calls) != 1:
            raise InvalidArgument(
                field,
                "is a function_call item, which stands for one tool call; the message has "
                f"{len(m.tool_calls)}",
            )
        call = m.tool_calls[0]
        _same(d, "call_id", call.id, field, "tool call id")
        _same(d, "name", call.name, field, "tool call name")
        _same(d, "arguments", call.arguments_json, field, "tool call arguments_json")
    elif kind == ASSISTANT and m.tool_calls:
        raise InvalidArgument(
            field,
            "is an assistant message item, which carries no tool calls; send each call as a "
            "message of its own with a function_call item",
        )
    elif kind == TOOL:
        _same(d, "call_id", m.call_id, field, "tool.call_id")
    return text


def item_texts(msgs: list[Msg], blocks: list[str] = ()) -> list[str]:
    """Each output item as JSON text: stored items as stored, others converted
    (and a stored item :func:`check_native` refuses, from before the check)."""
    out = [dumps({"role": "system", "content": b}) for b in blocks]
    for m in msgs:
        native = m.native
        if native is not None and native.format == NATIVE_FORMAT:
            try:
                out.append(check_native(m, "native.data", stored=True))
                continue
            except InvalidArgument:
                pass
        out += [dumps(x) for x in _out(m)]
    return out


def to_responses_json(msgs: list[Msg], blocks: list[str] = ()) -> str:
    """``blocks`` (summary, plan: first page only) and ``msgs`` as a JSON
    array of Responses input items."""
    return "[" + ",".join(item_texts(msgs, blocks)) + "]"
