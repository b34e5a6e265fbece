"""What both provider conversions share: exact JSON, field names, pairing.

* **Exact JSON.** Text is first checked by the one JSON rule
  (:func:`ctxd_sidecar.core.jsonvalue.parse_json`), then read again here with
  numbers kept as their text (:class:`Num`), so a tool call's ``input``
  object goes out and comes back with ``1.10`` and 30-digit integers intact,
  and a number is never mistaken for a string.
* **Pairing.** Both providers want every tool call answered right after the
  assistant message that made it. ctxd accepts results later (a long-running
  call answered after more user messages), so :func:`paired` moves each
  result up behind its call and answers a call still open *before* the end
  of the slice with :data:`PENDING_RESULT`; so does a call of a last round
  whose other calls have results (a provider wants all or none). A last
  round with no result at all is left open: the runtime is about to run it.
  Transcripts that already follow the rule come out unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ctxd_sidecar.core.contexts.model import ASSISTANT, TOOL, Msg
from ctxd_sidecar.core.errors import InvalidArgument
from ctxd_sidecar.core.jsonvalue import MAX_DEPTH, parse_json

#: Result text standing in for a call that has no result yet but is followed
#: by other messages (both providers refuse an unanswered call there).
PENDING_RESULT = "[no result yet: the call is still running]"
#: ctxd note messages go out as user text with this prefix.
NOTE_PREFIX = "[note] "


class Num(str):
    """A JSON number, kept as its text."""


def _reject(name: str) -> None:
    raise ValueError(name)


_exact = json.JSONDecoder(parse_int=Num, parse_float=Num, parse_constant=_reject)


def loads(text: str, *, field: str, max_depth: int = MAX_DEPTH) -> Any:
    """``text`` checked by the one JSON rule, then parsed with numbers as :class:`Num`."""
    parse_json(text, field=field, max_depth=max_depth)
    return _exact.decode(text)


def loads_stored(text: str) -> Any:
    """``text`` ctxd stored itself, parsed as :func:`loads` does but without
    the rule's checks (done when it was written): ValueError if it is not JSON."""
    try:
        return _exact.decode(text)
    except RecursionError:
        raise ValueError("nested too deep") from None


def dumps(value: Any) -> str:
    """Compact JSON of ``value``; :class:`Num` written as its text."""
    if isinstance(value, Num):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, dict):
        return "{" + ",".join(f"{dumps(str(k))}:{dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(dumps(v) for v in value) + "]"
    return json.dumps(value)


# -- reading request elements -------------------------------------------------------------
def obj(value: Any, field: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidArgument(field, "must be a JSON object")
    return value


def text_of(value: Any, field: str, *, required: bool = False) -> str:
    """A JSON string (``None``/absent as "" unless ``required``)."""
    if value is None and not required:
        return ""
    if not isinstance(value, str) or isinstance(value, Num):
        raise InvalidArgument(field, "must be a string")
    return value


def array(value: Any, field: str) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidArgument(field, "must be a JSON array")
    return value


def objects(value: Any, field: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each element of the JSON array ``value`` as (its field, the object)."""
    for i, item in enumerate(array(value, field)):
        f = f"{field}[{i}]"
        yield f, obj(item, f)


def refuse_set(d: dict[str, Any], keys: Sequence[str], field: str, why: str) -> None:
    """Refuse keys ctxd cannot keep when they carry a value (null/empty is fine)."""
    for k in keys:
        if d.get(k) not in (None, "", [], {}):
            raise InvalidArgument(f"{field}.{k}", why)


@dataclass(slots=True)
class Turn:
    """Converted messages and, for each, the request element it came from
    (so a domain refusal can name the element the caller wrote)."""

    messages: list[Msg]
    origins: list[str]

    def add(self, m: Msg, origin: str) -> None:
        self.messages.append(m)
        self.origins.append(origin)


def relabel(exc: InvalidArgument, origins: Sequence[str]) -> InvalidArgument:
    """A domain refusal naming ``messages[k]...`` renamed to the element the
    caller sent (``messages_json[i]...``, with ``.native...`` kept); others
    unchanged."""
    f = exc.field
    if f == "messages":  # the whole turn (none, or too many)
        return InvalidArgument("messages_json", exc.description)
    if f.startswith("messages[") and "]" in f:
        try:
            k = int(f[len("messages[") : f.index("]")])
        except ValueError:
            return exc
        if 0 <= k < len(origins):
            rest = f[f.index("]") + 1 :]
            # A native payload is the same field in the shape that carries one (ctxd's).
            keep = rest if rest.startswith(".native.") else ""
            return InvalidArgument(origins[k] + keep, exc.description)
    return exc


def call_names(turn: Turn) -> dict[str, str]:
    return {c.id: c.name for m in turn.messages for c in m.tool_calls}


# -- pairing ---------------------------------------------------------------------------------
def paired(msgs: Sequence[Msg]) -> list[Msg]:
    """``msgs`` with every tool result right behind the assistant message
    whose call it answers (a reused id: the latest earlier call), and calls
    unanswered given :data:`PENDING_RESULT` when later messages follow or
    another call of their round has its result.
    A result whose call is not in ``msgs`` (an earlier page) stays in place."""
    owner: dict[str, int] = {}
    answers: dict[int, list[Msg]] = {}
    moved: set[int] = set()
    for i, m in enumerate(msgs):
        if m.kind == ASSISTANT:
            for c in m.tool_calls:
                owner[c.id] = i
        elif m.kind == TOOL:
            a = owner.pop(m.call_id, None)
            if a is not None:
                answers.setdefault(a, []).append(m)
                moved.add(i)
    last_other = max((i for i, m in enumerate(msgs) if m.kind != TOOL), default=-1)
    out: list[Msg] = []
    for i, m in enumerate(msgs):
        if i in moved:
            continue
        out.append(m)
        if m.kind != ASSISTANT or not m.tool_calls:
            continue
        got = answers.get(i, [])
        out.extend(got)
        if i < last_other or got:
            done = {r.call_id for r in got}
            for c in m.tool_calls:
                if c.id not in done:
                    out.append(Msg(TOOL, call_id=c.id, name=c.name, content=PENDING_RESULT))
    return out
