"""Tool-call ids in a provider request: accepted, unique, stable, reversible.

ctxd keeps the ids a runtime sent, and those may be reused (``call0`` in
every round) or come from another provider (``functions.Bash:0``,
``call|2``). A provider request needs each id unique, and Anthropic needs
``^[a-zA-Z0-9_-]+$``. So each call is identified by its position (message
seq and index in the message) and, in a provider format, gets:

* its own id, when the provider accepts it and no earlier call of the live
  transcript used it (and it does not look like a mapped id);
* otherwise the mapped id ``ctxd<seq>x<k>_<base64url of the id>``: unique
  (seq and index), made only of ``[A-Za-z0-9_-]``, and reversible.

A result gets the id given to the call it answers (the latest earlier call
with its id). The choice for a call depends only on the messages before it,
so appends never change it and a read's prefix stays byte-identical. On the
way in, :func:`original` maps a mapped id back to the one ctxd keeps.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ctxd_sidecar.core.contexts.model import TOOL, Msg

ANTHROPIC_ID = re.compile(r"[A-Za-z0-9_-]+")
_MAPPED = re.compile(r"ctxd([0-9]{1,19})x([0-9]{1,4})_([A-Za-z0-9_-]*)")


def mapped(call_id: str, seq: int, index: int) -> str:
    body = base64.urlsafe_b64encode(call_id.encode()).decode().rstrip("=")
    return f"ctxd{seq}x{index}_{body}"


def original(out_id: str) -> str:
    """The id ctxd keeps for ``out_id`` a provider request carried (itself
    unless it is a mapped id)."""
    m = _MAPPED.fullmatch(out_id)
    if m is None:
        return out_id
    body = m.group(3)
    try:
        kept = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode()
    except (binascii.Error, ValueError):
        return out_id
    return kept if kept and mapped(kept, int(m.group(1)), int(m.group(2))) == out_id else out_id


def _accepted(call_id: str, provider: str) -> bool:
    if _MAPPED.fullmatch(call_id):
        return False
    return provider != "anthropic" or ANTHROPIC_ID.fullmatch(call_id) is not None


@dataclass(slots=True)
class IdMap:
    """The ids one provider sees for the calls and results of a transcript."""

    provider: str
    calls: dict[tuple[int, int], str] = field(default_factory=dict)
    results: dict[int, str] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)
    #: id kept by ctxd -> id given to its latest call.
    latest: dict[str, str] = field(default_factory=dict)

    def extend(self, msgs: Sequence[Msg]) -> None:
        """Add messages appended after those already mapped."""
        for m in msgs:
            for k, c in enumerate(m.tool_calls):
                out = c.id
                if out in self.used or not _accepted(out, self.provider):
                    out = mapped(c.id, m.seq, k)
                self.used.add(out)
                self.calls[(m.seq, k)] = out
                self.latest[c.id] = out
            if m.kind == TOOL:
                out = self.latest.get(m.call_id)
                if out is None:  # its call is not in the transcript
                    out = m.call_id
                    if out in self.used or not _accepted(out, self.provider):
                        out = mapped(m.call_id, m.seq, 0)
                self.results[m.seq] = out

    def apply(self, msgs: Sequence[Msg]) -> list[Msg]:
        """``msgs`` (mapped already) with the provider's ids."""
        out = []
        for m in msgs:
            if m.tool_calls:
                calls = tuple(
                    c if c.id == (new := self.calls.get((m.seq, k), c.id)) else replace(c, id=new)
                    for k, c in enumerate(m.tool_calls)
                )
                m = _copy(m, tool_calls=calls)
            elif m.kind == TOOL:
                new = self.results.get(m.seq, m.call_id)
                if new != m.call_id:
                    m = _copy(m, call_id=new)
            out.append(m)
        return out


def _copy(m: Msg, **changes) -> Msg:
    fresh = m.assigned(m.seq, m.ts, m.ver)
    for k, v in changes.items():
        setattr(fresh, k, v)
    return fresh


def id_map(msgs: Sequence[Msg], provider: str) -> IdMap:
    ids = IdMap(provider)
    ids.extend(msgs)
    return ids
