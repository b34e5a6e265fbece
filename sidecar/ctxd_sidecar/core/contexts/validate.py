"""Input checks for context operations.

Every check raises :class:`ctxd_sidecar.core.errors.InvalidArgument` naming the
field at fault with its path in the request (``messages[2].tool.call_id``),
and runs before anything is written, so bad input never reaches the store.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence

from ctxd_sidecar.core.contexts.model import ASSISTANT, KINDS, ROOT_ID, TOOL, Msg
from ctxd_sidecar.core.contexts.views import PAGE_BYTES
from ctxd_sidecar.core.errors import InvalidArgument
from ctxd_sidecar.core.jsonvalue import parse_json
from ctxd_sidecar.core.providers.responses import NATIVE_FORMAT, check_native

#: Context ids: "root" or an A2A contextId of 1-128 characters from
#: ``[A-Za-z0-9._:-]``, starting with a letter or digit (so ids never collide
#: with ctxd's reserved ``_`` names and are never ``.``/``..`` path segments).
CONTEXT_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
MAX_IDEMPOTENCY_KEY = 128
MAX_PRINCIPAL = 256
MAX_TASK = 256
MAX_MODEL_NAME = 256
MAX_TOOL_CALLS = 128
MAX_ID_CHARS = 256
#: Longest NativePayload.format.
MAX_NATIVE_FORMAT = 128
#: A message's text as a JSON string may take at most this (a reply in a
#: provider's JSON shape holds at least one message and must fit 4 MiB).
MAX_MESSAGE_JSON_BYTES = PAGE_BYTES
#: The most one byte of text can take as JSON (``\u0001``).
JSON_ESCAPE_MAX = 6


def json_bytes(m: Msg) -> int:
    """Bytes of the message's strings written as JSON strings (measured only
    for large messages: most text escapes to about its own size)."""
    strings = [m.text, m.content]
    for c in m.tool_calls:
        strings += (c.arguments_json, c.name, c.id)
    return sum(len(json.dumps(x, ensure_ascii=False).encode()) for x in strings if x)


def context_id(value: str, field: str = "context_id") -> str:
    if not value:
        raise InvalidArgument(field, 'is required ("root" or an A2A contextId)')
    if not CONTEXT_ID_RE.fullmatch(value):
        raise InvalidArgument(
            field,
            "must be 1-128 characters of A-Z, a-z, 0-9, '.', '_', ':' or '-', "
            "starting with a letter or digit",
        )
    return value


def bounded(value: str, field: str, limit: int) -> str:
    if len(value) > limit:
        raise InvalidArgument(field, f"is {len(value)} characters; at most {limit} are allowed")
    return value


def json_text(text: str, field: str, *, allow_empty: bool = False) -> None:
    """The one JSON rule (:mod:`ctxd_sidecar.core.jsonvalue`), naming ``field``."""
    parse_json(text, field=field, allow_empty=allow_empty)


def turn(
    messages: Sequence[Msg],
    *,
    max_messages: int,
    max_message_bytes: int,
) -> None:
    """Checks that need no context state: shape, kinds, sizes, JSON, and
    Responses items sent as native payloads."""
    if not messages:
        raise InvalidArgument("messages", "a turn needs at least one message")
    if len(messages) > max_messages:
        raise InvalidArgument(
            "messages",
            f"has {len(messages)} messages; contexts.max_turn_messages allows {max_messages}",
        )
    seen_calls: set[str] = set()
    for i, m in enumerate(messages):
        _message(m, f"messages[{i}]", max_message_bytes, seen_calls)


def _message(m: Msg, where: str, max_message_bytes: int, seen_calls: set[str]) -> None:
    """One message of a turn: its envelope, sizes and native payload, then
    what its kind carries."""
    if m.kind not in KINDS:
        raise InvalidArgument(
            where, "has no kind; set one of system, user, assistant, tool or note"
        )
    if m.ts < 0:
        raise InvalidArgument(f"{where}.ts_ms", "must not be negative")
    if m.native is not None and not 1 <= len(m.native.format) <= MAX_NATIVE_FORMAT:
        raise InvalidArgument(
            f"{where}.native.format",
            f"must name the payload's shape in 1-{MAX_NATIVE_FORMAT} characters",
        )
    carried = m.carried_bytes
    if carried > max_message_bytes:
        limit = f"contexts.max_message_bytes is {max_message_bytes}"
        raise InvalidArgument(where, f"is {carried} bytes of text/JSON; {limit}")
    size = m.size_bytes
    if size * JSON_ESCAPE_MAX > MAX_MESSAGE_JSON_BYTES:
        escaped = json_bytes(m)
        if escaped > MAX_MESSAGE_JSON_BYTES:
            raise InvalidArgument(
                where,
                f"takes {escaped} bytes as JSON (a control character takes 6); a message "
                f"may take at most {MAX_MESSAGE_JSON_BYTES}, so that a read in a JSON "
                "format fits a default client",
            )
    if m.kind == ASSISTANT:
        if len(m.tool_calls) > MAX_TOOL_CALLS:
            raise InvalidArgument(
                f"{where}.assistant.tool_calls", f"has more than {MAX_TOOL_CALLS} calls"
            )
        for j, call in enumerate(m.tool_calls):
            cw = f"{where}.assistant.tool_calls[{j}]"
            if not call.id:
                raise InvalidArgument(f"{cw}.id", "is required (the provider's call id)")
            bounded(call.id, f"{cw}.id", MAX_ID_CHARS)
            if call.id in seen_calls:
                raise InvalidArgument(f"{cw}.id", f"repeats call id {call.id!r} in this turn")
            seen_calls.add(call.id)
            if not call.name:
                raise InvalidArgument(f"{cw}.name", "is required (the tool's name)")
            json_text(call.arguments_json, f"{cw}.arguments_json", allow_empty=True)
    elif m.kind == TOOL:
        if not m.call_id:
            raise InvalidArgument(f"{where}.tool.call_id", "is required (the ToolCall.id answered)")
        bounded(m.call_id, f"{where}.tool.call_id", MAX_ID_CHARS)
        if m.content_json:
            json_text(m.content, f"{where}.tool.json")
    elif m.principal:
        bounded(m.principal, f"{where}.user.principal", MAX_PRINCIPAL)
    if m.native is not None and m.native.format == NATIVE_FORMAT:
        # Read back in the message's place: it must be the same message.
        # Other formats are the writer's own and stay opaque bytes.
        check_native(m, f"{where}.native.data")


def tool_results_answer_calls(
    messages: Sequence[Msg], known, answered: Collection[str] = ()
) -> None:
    """Every tool result names a call in the transcript (``known``: live calls
    and abandoned folded ones) or earlier in the turn, and one not answered
    yet (``answered``: known calls whose latest call has its result): OpenAI
    and Anthropic both refuse a request with two results for one call. A
    call id used again (providers number calls per turn) opens it again."""
    turn_calls: set[str] = set()
    done: set[str] = set()  # answered in this turn
    for i, m in enumerate(messages):
        if m.kind == ASSISTANT:
            for c in m.tool_calls:
                turn_calls.add(c.id)
                done.discard(c.id)
        elif m.kind == TOOL:
            where, cid = f"messages[{i}].tool.call_id", m.call_id
            if cid not in known and cid not in turn_calls:
                raise InvalidArgument(
                    where, f"{cid!r} answers no tool call in the transcript or earlier in this turn"
                )
            if cid in done or (cid in answered and cid not in turn_calls):
                already = "earlier in this turn" if cid in done else "in the transcript"
                raise InvalidArgument(
                    where,
                    f"call {cid!r} already has its result {already}; a call takes one result "
                    "(send a retried turn with its first idempotency_key)",
                )
            done.add(cid)


def is_root(cid: str) -> bool:
    return cid == ROOT_ID
