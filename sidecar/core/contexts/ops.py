"""Log records and how each one changes a context.

Every versioned change to a context is one log record (a JSON object with
``v`` = the new version, ``op`` = what it does, ``ts`` = wall-clock ms, and
op-specific fields). The same handler applies a record when it is first
committed and when the record is replayed on restore, so the live record and
the restored one cannot drift apart.

Record fields common to every op:

* ``v``: the version the record creates (the previous version + 1);
* ``op``: the handler name (``append`` here; compaction, plan, skills and
  preflight register their own with :func:`op`);
* ``ts``: wall-clock ms of the change (``updated`` follows it);
* ``idem``/``res``: optional idempotency key and the result first returned;
* ``cal``: optional calibration state (carried by the first record after a
  ``RecordUsage``, so calibration survives a restart without a write of its
  own).

A handler must be deterministic given the state and the record: anything
that depends on time, randomness or outside input is decided before the
record is written and stored in it. A handler that changes the summary or
the plan calls ``state.refresh_blocks()`` (their token estimate); one that
folds messages uses ``state.fold_messages(through_seq)``. A handler that needs the messages (not
just the counters) may assume ``state.loaded``; a listing peek falls back to a
full restore when it meets an op other than ``append``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sidecar.core.contexts.model import ContextState, Msg
from sidecar.core.contexts.tokens import Calibration

Handler = Callable[[ContextState, dict[str, Any]], None]

_HANDLERS: dict[str, Handler] = {}

#: Ops a listing peek can replay without the sealed messages.
COUNTER_ONLY_OPS = frozenset({"append", "plan", "preflight", "skills"})

#: What a checkpoint leaves in place of the log records it sealed.
SEALED = "sealed"


class DamagedRecord(Exception):
    """A stored record cannot be applied (unknown op, wrong version)."""


def op(name: str) -> Callable[[Handler], Handler]:
    """Register the handler for log records with ``op == name``."""

    def deco(fn: Handler) -> Handler:
        if name in _HANDLERS and _HANDLERS[name] is not fn:
            raise ValueError(f"op {name!r} is already registered")
        _HANDLERS[name] = fn
        return fn

    return deco


def known(name: str) -> bool:
    return name in _HANDLERS


def apply_record(state: ContextState, rec: dict[str, Any]) -> None:
    """Apply one record: check its version, run its handler, bump the version."""
    v = rec.get("v")
    if v != state.version + 1:
        raise DamagedRecord(
            f"context {state.id}: record version {v} does not follow {state.version}"
        )
    handler = _HANDLERS.get(rec.get("op", ""))
    if handler is None:
        raise DamagedRecord(f"context {state.id}: unknown record op {rec.get('op')!r}")
    handler(state, rec)
    state.version = v
    state.updated = max(state.updated, int(rec.get("ts", 0)))
    cal = rec.get("cal")
    if cal is not None:
        state.calibration = Calibration.from_dict(cal)
    key = rec.get("idem")
    if key:
        state.remember(key, rec.get("res") or {})


@op("append")
def _append(state: ContextState, rec: dict[str, Any]) -> None:
    """``msgs``: the turn's messages (seq/ts assigned); ``meta``: principal,
    task, model, model_window recorded with the turn."""
    built: list[Msg] | None = rec.get("_built")
    msgs = built if built is not None else [Msg.from_dict(d) for d in rec["msgs"]]
    if msgs and msgs[0].seq != state.next_seq:
        raise DamagedRecord(
            f"context {state.id}: turn starts at message {msgs[0].seq}, expected {state.next_seq}"
        )
    for m in msgs:
        state.add_message(m)
    meta = rec.get("meta") or {}
    for name in ("principal", "task", "model"):
        if name in meta:
            setattr(state, name, meta[name])
    if "model_window" in meta:
        state.model_window = int(meta["model_window"])
    if state.created == 0:
        state.created = int(rec.get("ts", 0))
    state.turns += 1
    state.archived = False
