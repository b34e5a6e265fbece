"""Log records and how each one changes a context: the op registry.

Every versioned change to a context is one log record (a JSON object with
``v`` = the new version, ``op`` = what it does, ``ts`` = wall-clock ms, and
op-specific fields). The same handler applies a record when it is first
committed and when the record is replayed on restore, so the live record and
the restored one cannot drift apart.

Record fields common to every op:

* ``v``: the version the record creates (the previous version + 1);
* ``op``: the name of its :class:`Op` in :data:`OPS`;
* ``ts``: wall-clock ms of the change (``updated`` follows it);
* ``idem``/``res``: optional idempotency key and the result first returned;
* ``cal``: optional calibration state (carried by the first record after a
  ``RecordUsage``, so calibration survives a restart without a write of its
  own).

Each op is declared once, in :data:`OPS` below: its name, the handler that
applies it, and whether it needs the messages (a listing peek replays the
log tail without loading sealed messages, and falls back to a full restore
when it meets an op that needs them). A handler must be deterministic given
the state and the record: anything that depends on time, randomness or
outside input is decided before the record is written and stored in it. A
handler that changes the summary or the plan calls
``state.refresh_blocks()``; one that folds messages uses
``state.fold_messages(through_seq)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ctxd_sidecar.core.compaction.summary import Summary
from ctxd_sidecar.core.contexts.model import ContextState, Msg, SkillRef, ToolCall
from ctxd_sidecar.core.contexts.tokens import Calibration
from ctxd_sidecar.core.plan import Plan

#: ``(state, record)``; an append's handler also takes the built messages.
Handler = Callable[..., None]

#: What a checkpoint leaves in place of the log records it sealed.
SEALED = "sealed"
#: Compaction records kept on a context (oldest dropped; see :mod:`.archive`).
RECORDS_KEPT = 64


@dataclass(frozen=True, slots=True)
class Op:
    """One kind of log record."""

    name: str
    apply: Handler
    #: The handler reads or changes the transcript itself, so it can only be
    #: replayed on a fully loaded state (not on a listing peek).
    needs_messages: bool = False
    #: The event kind the feed announces for it (:mod:`.events`).
    event: str = "change"
    #: It changes the views beyond appending messages (incremental reads
    #: from before it rebuild, see :mod:`.views`).
    reshapes: bool = True


class DamagedRecord(Exception):
    """A stored record cannot be applied (unknown op, wrong version)."""


# -- the built-in ops ----------------------------------------------------------------------
def _append(state: ContextState, rec: dict[str, Any], built: Sequence[Msg] | None = None) -> None:
    """``msgs``: the turn's messages (seq/ts assigned); ``meta``: principal,
    task, model, model_window recorded with the turn; ``skills``: the loaded
    set after the turn when its ``@skill:`` references changed it;
    ``create``: a CreateContext (no messages, not counted as a turn). ``built``:
    the same messages as objects, when the record is applied as it is
    committed (no need to decode what was just encoded)."""
    msgs = built if built is not None else [Msg.from_dict(d) for d in rec["msgs"]]
    if msgs and msgs[0].seq != state.next_seq:
        raise DamagedRecord(
            f"context {state.id}: turn starts at message {msgs[0].seq}, expected {state.next_seq}"
        )
    for m in msgs:
        state.add_message(m)
        for c in m.tool_calls:
            state.abandoned.pop(c.id, None)  # restated with its late result
    meta = rec.get("meta") or {}
    for name in ("principal", "task", "model"):
        if name in meta:
            setattr(state, name, meta[name])
    if "model_window" in meta:
        state.model_window = int(meta["model_window"])
    if "skills" in rec:
        _skills(state, {"refs": rec["skills"]})
    if state.created == 0:
        state.created = int(rec.get("ts", 0))
    if msgs or not rec.get("create"):
        state.turns += 1  # a creation (CreateContext: no messages) is no turn
    state.archived = False


def _compact(state: ContextState, rec: dict[str, Any]) -> None:
    """``through``: last folded seq; ``summary``: the merged summary as stored;
    ``evict``: skill names whose bodies leave the context; ``abandoned``:
    calls folded without a result; ``record``: what it did (:mod:`.archive`)."""
    folded = state.fold_messages(int(rec["through"]))
    # Folded before any segment held them: the next checkpoint archives them.
    state.unarchived.extend(m for m in folded if m.seq > state.sealed_through)
    body = rec.get("record")
    if body:
        record = {**body, "id": f"c{rec['v']}", "v": rec["v"], "ts": rec.get("ts", 0)}
        state.compactions = [*state.compactions, record][-RECORDS_KEPT:]
    for cid, name, args in rec.get("abandoned", ()):
        state.abandoned[cid] = ToolCall(cid, name, args)
    state.summary = Summary.from_dict(rec["summary"])
    evict = set(rec.get("evict") or ())
    if evict:
        state.skills = [s for s in state.skills if s.name not in evict]
    state.refresh_blocks()


def _plan(state: ContextState, rec: dict[str, Any]) -> None:
    """``plan``: the whole plan after the change (its JSON form), or null when cleared."""
    data = rec.get("plan")
    state.plan = Plan.from_dict(data) if data else None
    state.refresh_blocks()


def _preflight(state: ContextState, rec: dict[str, Any]) -> None:
    """``json``: the verdict text as sent (validated)."""
    state.preflight = str(rec.get("json", ""))


def _skills(state: ContextState, rec: dict[str, Any]) -> None:
    """``refs``: the whole loaded set after the change, ``[[name, sha256], ...]``."""
    state.skills = [SkillRef(str(n), str(h)) for n, h in rec.get("refs", ())]


def _truncate(state: ContextState, rec: dict[str, Any]) -> None:
    """``from``: the first seq removed; every live message from it on goes
    (TruncateContext, see :mod:`.truncation`)."""
    state.truncate_from(int(rec["from"]))


def _deleted(state: ContextState, rec: dict[str, Any]) -> None:
    """The fence of a deletion: the incarnation ends at this version, so no
    writer anywhere can append to it any more (its version is taken)."""
    state.deleted = True


APPEND = Op("append", _append, event="turn", reshapes=False)
COMPACT = Op("compact", _compact, needs_messages=True, event="compaction")
PLAN = Op("plan", _plan, event="plan")
PREFLIGHT = Op("preflight", _preflight, event="preflight", reshapes=False)
SKILLS = Op("skills", _skills, event="skills", reshapes=False)
DELETED = Op("deleted", _deleted, event="deleted")
TRUNCATE = Op("truncate", _truncate, needs_messages=True, event="truncate")

#: Every op a log may hold, by name.
OPS: dict[str, Op] = {
    o.name: o for o in (APPEND, COMPACT, PLAN, PREFLIGHT, SKILLS, DELETED, TRUNCATE)
}


def register(new: Op) -> Op:
    """Add an op (extensions and tests); a name is registered once."""
    if new.name in OPS and OPS[new.name] is not new:
        raise ValueError(f"op {new.name!r} is already registered")
    OPS[new.name] = new
    return new


def event_of(rec: dict[str, Any]) -> str:
    """The event kind a record is announced as."""
    found = OPS.get(rec.get("op", ""))
    return found.event if found is not None else "change"


def needs_messages(rec: dict[str, Any]) -> bool:
    """Whether replaying ``rec`` needs the full transcript (unknown ops do)."""
    found = OPS.get(rec.get("op", ""))
    return found is None or found.needs_messages


def apply_record(
    state: ContextState, rec: dict[str, Any], built: Sequence[Msg] | None = None
) -> None:
    """Apply one record: check its version, run its handler, bump the version.
    ``built``: an append's messages as objects (see :func:`_append`)."""
    v = rec.get("v")
    if v != state.version + 1:
        raise DamagedRecord(
            f"context {state.id}: record version {v} does not follow {state.version}"
        )
    found = OPS.get(rec.get("op", ""))
    if found is None:
        raise DamagedRecord(f"context {state.id}: unknown record op {rec.get('op')!r}")
    if built is None:
        found.apply(state, rec)
    else:
        found.apply(state, rec, built)
    state.version = v
    if found.reshapes:
        state.reshaped_at = v
    state.updated = max(state.updated, int(rec.get("ts", 0)))
    cal = rec.get("cal")
    if cal is not None:
        state.calibration = Calibration.from_dict(cal)
    key = rec.get("idem")
    if key:
        state.remember(key, rec.get("res") or {})
