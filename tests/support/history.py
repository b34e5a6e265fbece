"""A history checker for replicas: every call recorded with when it was
invoked and when it completed, then each key's history checked against a
sequential model, as Jepsen's Knossos does.

A call that completed with an answer is *ok* (it happened, with what it
returned) or *failed* (a definite refusal, e.g. ABORTED: it did not happen).
A call whose outcome is unknown (UNAVAILABLE, a deadline) may or may not have
happened, at any moment after it was invoked. A history is linearizable when
some order of its calls, each placed between its invocation and its
completion (unknown ones anywhere after their invocation, or nowhere), is a
run of the model. The search (Wing & Gong, with Lowe's memo of visited
configurations) is exact; histories are kept short per key so it is fast.

Every written value is unique (a write id), so the named findings say *what*
went wrong, not only that something did:

* ``applied twice``: a write answered as refused was applied (a caller's
  compare-and-set loop then applies its change a second time);
* ``stale read``: a read that began after a write was acknowledged does not
  reflect it (nor anything that could have replaced it);
* ``not linearizable``: no order explains the history (with the call the
  search could not place).

Two models: :data:`REGISTER` (a memory key: ``read``, ``cas`` from an
expected write id to a new one, ``create``) and :data:`LOG` (a context:
``get``, ``append`` at an expected version, ``delete``). A context's
``get_at`` reads an earlier version (GetContextRequest.at_version): it
constrains no order, but every read of one (incarnation, version) must see
the same turns (:func:`versions_changed`).
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

#: A model's step: the state after ``op`` from ``state``, or ``_NO`` when the
#: op's recorded outcome is impossible there.
_NO = object()


@dataclass(eq=False)
class Op:
    """One call. ``arg`` is what was asked (``cas``: (expected, new) write ids;
    ``append``: (expected version, text)); ``out`` what an ok call returned
    (``read``/``get``: the value seen, None for absent; ``delete``: whether
    something was deleted)."""

    process: int
    key: str
    f: str
    arg: Any = None
    invoke: float = 0.0
    complete: float | None = None
    #: True: happened; False: refused (did not happen); None: unknown.
    ok: bool | None = None
    out: Any = None
    #: ``get``/``get_at``: the (incarnation, version) the answer was of.
    version: tuple[str, int] | None = None

    def __str__(self) -> str:
        state = {True: "ok", False: "refused", None: "unknown"}[self.ok]
        out = (
            f" -> {self.out!r}" if self.ok and self.f in {"read", "get", "get_at", "delete"} else ""
        )
        out += f" @{self.version}" if self.version else ""
        done = "?" if self.complete is None else f"{self.complete:.3f}"
        arg = "" if self.arg is None else repr(self.arg)
        return f"p{self.process} {self.f}({arg}){out} {state} [{self.invoke:.3f}, {done}]"


class Recorder:
    """Thread-safe: ``begin`` before the call, ``end`` after it."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self._lock = threading.Lock()
        self._t0 = time.monotonic()

    def begin(self, process: int, key: str, f: str, arg: Any = None) -> Op:
        op = Op(process, key, f, arg, invoke=time.monotonic() - self._t0)
        with self._lock:
            self.ops.append(op)
        return op

    def end(self, op: Op, ok: bool | None, out: Any = None) -> None:
        """``ok`` None: the outcome is unknown (the call may have happened)."""
        op.ok, op.out = ok, out
        if ok is not None:
            op.complete = time.monotonic() - self._t0

    def by_key(self) -> dict[str, list[Op]]:
        keys: dict[str, list[Op]] = defaultdict(list)
        for op in self.ops:
            keys[op.key].append(op)
        return keys


# -- models ------------------------------------------------------------------------------
def _register(state: Hashable, op: Op) -> Any:
    """A memory key holding a write id (None: absent)."""
    if op.f == "read":
        return state if op.out == state else _NO
    if op.f == "cas":
        expected, new = op.arg
        holds = state is not None and state == expected
    elif op.f == "create":
        new, holds = op.arg, state is None
    else:
        raise ValueError(op.f)
    if op.ok is False:
        return state if not holds else _NO
    return new if holds else _NO


def _log(state: Hashable, op: Op) -> Any:
    """A context: the tuple of its turns' texts (None: absent)."""
    if op.f == "get":
        return state if op.out == state else _NO
    if op.f == "append":
        expected, text = op.arg
        holds = len(state or ()) == expected
        if op.ok is False:
            return state if not holds else _NO
        return (*(state or ()), text) if holds else _NO
    if op.f == "delete":
        if op.ok is False:
            return state  # refused: nothing deleted
        if op.ok and op.out != (state is not None):
            return _NO
        return None
    raise ValueError(op.f)


@dataclass(frozen=True)
class Model:
    name: str
    step: Callable[[Hashable, Op], Any]
    initial: Hashable = None


REGISTER = Model("register", _register)
LOG = Model("log", _log)


# -- the search ----------------------------------------------------------------------------
@dataclass
class Verdict:
    ok: bool
    #: The longest order found that explains a prefix of the history.
    order: list[Op] = field(default_factory=list)
    #: When not ok: the calls none of which could come next after ``order``.
    stuck: list[Op] = field(default_factory=list)


def linearizable(ops: list[Op], model: Model, *, budget: int = 2_000_000) -> Verdict:
    """Whether some order of ``ops`` is a run of ``model`` (see module doc)."""
    ops = sorted((o for o in ops if o.ok is not None or _writes(o)), key=lambda o: o.invoke)
    required = [i for i, o in enumerate(ops) if o.ok is not None]
    done_all = sum(1 << i for i in required)
    inf = float("inf")
    complete = [o.complete if o.complete is not None else inf for o in ops]
    seen: set[tuple[int, Hashable]] = set()
    best: list[int] = []
    path: list[int] = []
    steps = 0

    def search(mask: int, state: Hashable) -> bool:
        nonlocal best, steps
        if mask & done_all == done_all:
            return True
        if (mask, state) in seen:
            return False
        seen.add((mask, state))
        steps += 1
        if steps > budget:
            raise RuntimeError(f"history too long to check exactly ({len(ops)} calls)")
        # The earliest completion among calls still to place: nothing
        # invoked after it may come before it.
        horizon = min(complete[i] for i in required if not mask >> i & 1)
        for i, op in enumerate(ops):
            if mask >> i & 1 or op.invoke > horizon:
                continue
            nxt = model.step(state, op)
            if nxt is _NO:
                continue
            path.append(i)
            if len(path) > len(best):
                best = list(path)
            if search(mask | 1 << i, nxt):
                return True
            path.pop()
        return False

    if search(0, model.initial):
        return Verdict(True, [ops[i] for i in path])
    placed = sum(1 << i for i in best)
    rest = [i for i in required if not placed >> i & 1]
    horizon = min(complete[i] for i in rest)
    stuck = [ops[i] for i in rest if ops[i].invoke <= horizon]
    return Verdict(False, [ops[i] for i in best], stuck)


def _writes(op: Op) -> bool:
    return op.f in {"cas", "create", "append", "delete"}


# -- named findings ----------------------------------------------------------------------------
def _written(op: Op) -> Any:
    return op.arg[1] if op.f in {"cas", "append"} else op.arg


def applied_twice(ops: list[Op]) -> list[str]:
    """Writes answered as refused whose value was seen afterwards."""
    seen: dict[Any, Op] = {}
    for op in ops:
        if op.ok and op.f == "read" and op.out is not None:
            seen.setdefault(op.out, op)
        if op.ok and op.f == "get":
            for text in op.out or ():
                seen.setdefault(text, op)
        if op.f == "cas" and op.ok is not None:
            seen.setdefault(op.arg[0], op)  # its caller read that write
    out = []
    for op in ops:
        if op.ok is False and op.f in {"cas", "create", "append"} and _written(op) in seen:
            out.append(
                f"applied twice: {op} was answered as refused, yet {seen[_written(op)]} saw "
                "its write (a compare-and-set loop applies it again)"
            )
    return out


def stale_reads(ops: list[Op]) -> list[str]:
    """Reads that began after a write was acknowledged and reflect neither
    it nor anything that may have replaced it."""
    out = []
    reads = [o for o in ops if o.ok and o.f in {"read", "get"}]
    acked = [o for o in ops if o.ok and o.f in {"cas", "create", "append"}]
    deletes = [o for o in ops if o.f == "delete" and o.ok is not False]
    parent = {_written(o): o.arg[0] for o in ops if o.f == "cas"}
    for r in reads:
        for w in acked:
            if w.complete is None or w.complete >= r.invoke:
                continue
            if w.f == "append":
                if w.arg[1] in (r.out or ()):
                    continue
                erased = any(
                    d.invoke < r.complete and (d.complete is None or d.complete > w.invoke)
                    for d in deletes
                )
                if erased:
                    continue
            elif not _before(r.out, _written(w), parent):
                continue
            out.append(f"stale read: {r} began after {w} was acknowledged and misses it")
            break
    return out


def versions_changed(ops: list[Op]) -> list[str]:
    """Two reads of one (incarnation, version) that saw different turns: a
    version, once made, never changes, whichever replica reads it and however
    long after."""
    first: dict[tuple[str, int], Op] = {}
    out = []
    for op in ops:
        if not op.ok or op.f not in {"get", "get_at"} or op.version is None or op.out is None:
            continue
        seen = first.setdefault(op.version, op)
        if seen.out != op.out:
            out.append(f"version changed: {op} and {seen} read {op.version} differently")
    return out


def _before(seen: Any, written: Any, parent: dict) -> bool:
    """Whether ``seen`` is an older write than ``written`` (or absent)."""
    if seen is None:
        return True
    at = parent.get(written)
    while at is not None:
        if at == seen:
            return True
        at = parent.get(at)
    return False


# -- checking a whole run ----------------------------------------------------------------------
@dataclass
class Report:
    findings: list[str]
    keys: int
    calls: int
    unknown: int

    @property
    def ok(self) -> bool:
        return not self.findings

    def __str__(self) -> str:
        head = f"{self.keys} keys, {self.calls} calls ({self.unknown} of unknown outcome)"
        return head + "".join(f"\n  {f}" for f in self.findings[:20])


def check(histories: dict[str, list[Op]], model: Model) -> Report:
    """Every key's history against ``model``; the findings of all keys."""
    findings: list[str] = []
    calls = unknown = 0
    for key, ops in sorted(histories.items()):
        calls += len(ops)
        unknown += sum(o.ok is None for o in ops)
        named = applied_twice(ops) + stale_reads(ops) + versions_changed(ops)
        verdict = linearizable([o for o in ops if o.f != "get_at"], model)
        if not verdict.ok and not named:
            last = verdict.order[-1] if verdict.order else None
            named.append(
                f"not linearizable: after {len(verdict.order)} calls (last {last}) none of "
                + "; ".join(map(str, verdict.stuck))
                + " can come next"
            )
        findings.extend(f"{key}: {f}" for f in named)
    return Report(findings, len(histories), calls, unknown)
