"""ADK events as ctxd messages, and ADK's ids as ctxd ids and memory keys.

Each event is stored as ctxd messages that ctxd understands (a user turn,
the model's text and tool calls, tool results, or a note), each carrying the
event itself, byte for byte as ADK's JSON, in ``Message.native`` (format
:data:`EVENT_FORMAT`): compaction folds and summarises by what ctxd
understands, and a read gives the events back exactly as appended.

An event with several function responses (parallel tool calls) becomes one
tool result per response, so every call is answered; the last carries the
event, the others :data:`PART_FORMAT` with no data (skipped on read).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any
from urllib.parse import quote

from google.adk.events import Event, EventActions
from google.adk.events.event_actions import EventCompaction
from google.genai import types

from ctxd_client._api.ctxd.v1 import context_pb2 as pb

#: NativePayload.format of a message that carries one ADK event.
EVENT_FORMAT = "google.adk.event"
#: NativePayload.format of the other results of a parallel-call event.
PART_FORMAT = "google.adk.event.part"
#: Author and invocation of the event a read gives for ctxd's summary.
SUMMARY_AUTHOR = "ctxd"

_KEEP = re.compile(r"[A-Za-z0-9.-]")
_CONTEXT_ID_MAX = 128
_SEGMENT_MAX = 60


# -- ids ------------------------------------------------------------------------------------------
def _digest(text: str, n: int = 32) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def _id_part(name: str, limit: int) -> str:
    """``name`` in the context id alphabet without ``:`` (the separator):
    ``[A-Za-z0-9.-]`` kept, every other character ``_XX`` per UTF-8 byte (so
    distinct names stay distinct); too long, ``_h`` and a hash (``_h`` is no
    escape, so it collides with nothing encoded)."""
    out = "".join(
        ch if _KEEP.fullmatch(ch) else "".join(f"_{b:02x}" for b in ch.encode()) for ch in name
    )
    return out if len(out) <= limit else "_h" + _digest(name, min(32, limit - 2))


def context_prefix(prefix: str, app_name: str, user_id: str | None = None) -> str:
    """The id prefix of an app's sessions (and of one user's, with ``user_id``)."""
    limit = (_CONTEXT_ID_MAX - len(prefix) - 2) // 3
    out = f"{prefix}{_id_part(app_name, limit)}:"
    return out if user_id is None else f"{out}{_id_part(user_id, limit)}:"


def session_context_id(prefix: str, app_name: str, user_id: str, session_id: str) -> str:
    """The context that holds one session's events."""
    limit = (_CONTEXT_ID_MAX - len(prefix) - 2) // 3
    return context_prefix(prefix, app_name, user_id) + _id_part(session_id, limit)


def _segment(name: str) -> str:
    """One memory key segment: ``=`` and the name percent-encoded (never
    empty, ``.`` or ``..``, no ``/`` or whitespace); too long, ``#`` and a hash."""
    out = quote(name, safe="")
    return "=" + out if len(out) <= _SEGMENT_MAX else "#" + _digest(name)


def app_key(prefix: str, app_name: str) -> str:
    return f"{prefix}adk/{_segment(app_name)}/app"


def user_key(prefix: str, app_name: str, user_id: str | None = None) -> str:
    """A user's state record (all users' with ``user_id`` None: a list prefix)."""
    base = f"{prefix}adk/{_segment(app_name)}/user/"
    return base if user_id is None else base + _segment(user_id)


def session_key(
    prefix: str, app_name: str, user_id: str | None = None, session_id: str | None = None
) -> str:
    """A session's record (with fewer ids: the list prefix of a user's or app's)."""
    base = f"{prefix}adk/{_segment(app_name)}/session/"
    if user_id is None:
        return base
    base += _segment(user_id) + "/"
    return base if session_id is None else base + _segment(session_id)


def idempotency_key(data: bytes) -> str:
    """The same event appended again (a retried call) appends nothing twice."""
    return "adk-" + hashlib.sha256(data).hexdigest()[:48]


# -- events as messages --------------------------------------------------------------------------
def encode(event: Event) -> bytes:
    return event.model_dump_json(exclude_none=True).encode()


def _native(data: bytes, fmt: str = EVENT_FORMAT) -> pb.NativePayload:
    return pb.NativePayload(format=fmt, data=data)


def _texts(parts: list[types.Part]) -> str:
    return "\n".join(p.text for p in parts if p.text and not p.thought)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def describe(event: Event) -> str:
    """A note's text for an event ctxd has no kind for (never empty)."""
    parts = list(event.content.parts or []) if event.content else []
    bits = [_texts(parts)]
    for p in parts:
        if p.function_call:
            bits.append(f"call {p.function_call.name}({_json(p.function_call.args or {})})")
        if p.function_response:
            bits.append(f"{p.function_response.name} -> {_json(p.function_response.response)}")
        if p.inline_data or p.file_data:
            bits.append("[media]")
    if event.actions and event.actions.state_delta:
        bits.append("state: " + ", ".join(sorted(event.actions.state_delta)))
    body = "; ".join(b for b in bits if b)
    return f"[{event.author}] {body}" if body else f"[{event.author}] event"


def as_note(event: Event, data: bytes) -> list[pb.Message]:
    return [pb.Message(note=pb.NoteMessage(text=describe(event)), native=_native(data))]


def project(event: Event, data: bytes) -> list[pb.Message]:
    """The messages that stand for ``event`` (see the module's doc)."""
    parts = list(event.content.parts or []) if event.content else []
    results = [p.function_response for p in parts if p.function_response]
    calls = [p.function_call for p in parts if p.function_call]
    text = _texts(parts)
    if results and all(r.id for r in results):
        out = [
            pb.Message(
                tool=pb.ToolResult(call_id=r.id, name=r.name or "", json=_json(r.response or {})),
                native=_native(b"", PART_FORMAT),
            )
            for r in results
        ]
        out[-1].native.CopyFrom(_native(data))
        return out
    role = event.content.role if event.content else None
    if not results and (calls or (text and role == "model")):
        if not all(c.id for c in calls):
            return as_note(event, data)
        tool_calls = [
            pb.ToolCall(id=c.id, name=c.name or "", arguments_json=_json(c.args or {}))
            for c in calls
        ]
        msg = pb.AssistantMessage(text=text, tool_calls=tool_calls)
        return [pb.Message(assistant=msg, native=_native(data))]
    if text and not results and role == "user":
        return [pb.Message(user=pb.UserMessage(text=text), native=_native(data))]
    return as_note(event, data)


def decode(message: pb.Message) -> Event | None:
    """The event a message carries (None: a part, or not written by ADK)."""
    if message.native.format != EVENT_FORMAT:
        return None
    return Event.model_validate_json(message.native.data)


def summary_event(text: str, end: float) -> Event:
    """ctxd's summary of what compaction folded, as ADK's own compaction
    event (``actions.compaction``): ADK's request builder puts its content
    where the folded events were."""
    content = types.Content(role="model", parts=[types.Part(text=text)])
    return Event(
        author=SUMMARY_AUTHOR,
        invocation_id=SUMMARY_AUTHOR,
        timestamp=end,
        actions=EventActions(
            compaction=EventCompaction(
                start_timestamp=0.0, end_timestamp=end, compacted_content=content
            )
        ),
    )
