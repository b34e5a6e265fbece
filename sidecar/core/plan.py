"""The working plan of a context, and the preflight verdict stored next to it.

A plan is a small ordered checklist the model owns for one conversation: a
goal and up to ``plan.max_items`` items. It is temporary by intent (it belongs
to the conversation, never to agent memory) and durable by construction (it is
part of the context record and checkpointed with it).

Every operation here is pure: it takes the current plan (or ``None``) and
returns a new one, validating everything before building the result, so a
rejected request never leaves a half-edited plan behind. The caller (the
context record) bumps the version and checkpoints.

Statuses and the transitions an explicit update may make::

    from \\ to     pending  in_progress  done  blocked  skipped
    pending          =          yes      yes     yes      yes
    in_progress     yes          =       yes     yes      yes
    blocked         yes         yes      yes      =       yes
    done            yes         no       no      no       no
    skipped         yes         no       no      no       no

``=`` (setting the status an item already has) is accepted and changes
nothing. ``done`` and ``skipped`` are finished: the only way out is back to
``pending`` (reopening is deliberate, so the model says so rather than
flipping a finished step straight to another state). Anything marked ``no``
is refused with FailedPrecondition naming the allowed targets.

Implicit transitions:

* :meth:`Planner.create`: every item starts ``pending`` and the first one
  becomes ``in_progress`` - a new plan is being worked on from its first
  step.
* Binding an item (``update(..., bind=...)``) without an explicit status moves
  a ``pending`` or ``blocked`` item to ``in_progress`` (a run was started for
  it). A finished item cannot be bound. A binding is unique among open
  (pending / in_progress / blocked) items, so a report always finds one item.
* :meth:`Planner.report_run`: the open item bound to the run becomes ``done``
  (succeeded) or ``blocked`` (failed / cancelled, with the reason as its
  note), and the next ``pending`` item - the first after it in plan order,
  else the first from the top - becomes ``in_progress``. Reporting the same
  outcome twice is a no-op (retries are safe).
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from sidecar.config import PlanConfig
from sidecar.core.errors import FailedPrecondition, InvalidArgument, LimitExceeded, NotFound
from sidecar.core.jsonvalue import parse_json

#: Caller-chosen item ids: 1-64 characters of this set.
ITEM_ID_RE = re.compile(r"[A-Za-z0-9._-]{1,64}")
#: Largest binding id (run, subagent or task id) in characters.
MAX_BINDING_ID_CHARS = 256


class PlanStatus(StrEnum):
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    DONE = "done"
    BLOCKED = "blocked"
    SKIPPED = "skipped"


class BindingKind(StrEnum):
    RUN = "run"
    SUBAGENT = "subagent"
    TASK = "task"


class RunOutcome(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


#: Finished statuses; ReportRun never touches them and they cannot be bound.
FINISHED = frozenset({PlanStatus.DONE, PlanStatus.SKIPPED})
#: Statuses whose binding is live (ReportRun looks among these).
OPEN = frozenset({PlanStatus.PENDING, PlanStatus.IN_PROGRESS, PlanStatus.BLOCKED})

#: status -> the statuses an explicit update may move it to (see module doc).
TRANSITIONS: Mapping[PlanStatus, frozenset[PlanStatus]] = {
    PlanStatus.PENDING: frozenset(
        {PlanStatus.IN_PROGRESS, PlanStatus.DONE, PlanStatus.BLOCKED, PlanStatus.SKIPPED}
    ),
    PlanStatus.IN_PROGRESS: frozenset(
        {PlanStatus.PENDING, PlanStatus.DONE, PlanStatus.BLOCKED, PlanStatus.SKIPPED}
    ),
    PlanStatus.BLOCKED: frozenset(
        {PlanStatus.PENDING, PlanStatus.IN_PROGRESS, PlanStatus.DONE, PlanStatus.SKIPPED}
    ),
    PlanStatus.DONE: frozenset({PlanStatus.PENDING}),
    PlanStatus.SKIPPED: frozenset({PlanStatus.PENDING}),
}

#: Rendering marks, one per status.
MARKS: Mapping[PlanStatus, str] = {
    PlanStatus.PENDING: "[ ]",
    PlanStatus.IN_PROGRESS: "[~]",
    PlanStatus.DONE: "[x]",
    PlanStatus.BLOCKED: "[!]",
    PlanStatus.SKIPPED: "[-]",
}


@dataclass(frozen=True)
class Binding:
    """What a plan item waits on: a run, a subagent or a task, by id."""

    kind: BindingKind
    id: str

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind.value, "id": self.id}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Binding:
        return cls(BindingKind(data["kind"]), str(data["id"]))

    def __str__(self) -> str:
        return f"{self.kind.value} {self.id}"


@dataclass
class PlanItem:
    id: str
    title: str
    detail: str = ""
    status: PlanStatus = PlanStatus.PENDING
    note: str = ""
    bound: Binding | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "title": self.title, "status": self.status.value}
        if self.detail:
            out["detail"] = self.detail
        if self.note:
            out["note"] = self.note
        if self.bound is not None:
            out["bound"] = self.bound.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PlanItem:
        bound = data.get("bound")
        return cls(
            id=str(data["id"]),
            title=str(data["title"]),
            detail=str(data.get("detail", "")),
            status=PlanStatus(data.get("status", PlanStatus.PENDING.value)),
            note=str(data.get("note", "")),
            bound=Binding.from_dict(bound) if bound else None,
        )


@dataclass
class Plan:
    goal: str
    items: list[PlanItem] = field(default_factory=list)
    updated_ms: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "goal": self.goal,
            "items": [i.to_dict() for i in self.items],
            "updated_ms": self.updated_ms,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Plan:
        return cls(
            goal=str(data["goal"]),
            items=[PlanItem.from_dict(i) for i in data.get("items", [])],
            updated_ms=int(data.get("updated_ms", 0)),
        )

    def item(self, item_id: str) -> PlanItem | None:
        return next((i for i in self.items if i.id == item_id), None)

    @property
    def done_count(self) -> int:
        return sum(1 for i in self.items if i.status is PlanStatus.DONE)

    @property
    def complete(self) -> bool:
        """Non-empty and nothing left open."""
        return bool(self.items) and all(i.status in FINISHED for i in self.items)

    def render(self) -> str:
        """The plan as the model sees it (prompt tail and context slice)."""
        lines = [f"Plan ({self.done_count}/{len(self.items)} done): {self.goal}"]
        for item in self.items:
            line = f"{MARKS[item.status]} {item.id}. {item.title}"
            if item.detail:
                line += f" — {item.detail}"
            if item.note:
                line += f" ({item.note})"
            if item.bound is not None:
                line += f" [{item.bound}]"
            lines.append(line)
        return "\n".join(lines)


@dataclass(frozen=True)
class PlanItemSpec:
    """A new item: ``id`` empty means "generate one"."""

    title: str
    detail: str = ""
    id: str = ""


@dataclass(frozen=True)
class RunReport:
    """What :meth:`Planner.report_run` did."""

    plan: Plan
    #: The bound item, now done or blocked.
    item_id: str
    #: The pending item that became in_progress, if any.
    advanced_id: str | None
    #: False when the same outcome had already been applied (a retried report).
    changed: bool


def parse_status(value: PlanStatus | str, field_name: str) -> PlanStatus:
    try:
        return PlanStatus(value)
    except ValueError:
        allowed = ", ".join(s.value for s in PlanStatus)
        raise InvalidArgument(
            field_name, f"unknown status {value!r}; use one of {allowed}"
        ) from None


def parse_binding(kind: BindingKind | str, binding_id: str, field_name: str) -> Binding:
    try:
        parsed = BindingKind(kind)
    except ValueError:
        allowed = ", ".join(k.value for k in BindingKind)
        raise InvalidArgument(
            f"{field_name}.kind", f"unknown binding kind {kind!r}; use one of {allowed}"
        ) from None
    if not isinstance(binding_id, str) or not binding_id.strip():
        raise InvalidArgument(f"{field_name}.id", "must name the run, subagent or task")
    if len(binding_id) > MAX_BINDING_ID_CHARS or _has_control(binding_id):
        raise InvalidArgument(
            f"{field_name}.id",
            f"must be at most {MAX_BINDING_ID_CHARS} characters without control characters",
        )
    return Binding(parsed, binding_id)


def _has_control(text: str) -> bool:
    return any(ord(c) < 32 or ord(c) == 127 for c in text)


def _now_ms() -> int:
    return int(time.time() * 1000)


class Planner:
    """Plan operations with the configured caps and a clock for ``updated_ms``."""

    def __init__(self, config: PlanConfig | None = None, *, now_ms: Callable[[], int] = _now_ms):
        self.limits = config or PlanConfig()
        self._now_ms = now_ms

    # -- validation helpers ---------------------------------------------------------------
    def _title(self, value: str, field_name: str) -> str:
        title = value.strip() if isinstance(value, str) else ""
        if not title:
            raise InvalidArgument(field_name, "must not be empty")
        if len(title) > self.limits.max_title_chars or "\n" in title or _has_control(title):
            raise InvalidArgument(
                field_name,
                f"must be one line of at most {self.limits.max_title_chars} characters",
            )
        return title

    def _text(self, value: str, field_name: str) -> str:
        if not isinstance(value, str):
            raise InvalidArgument(field_name, "must be text")
        text = value.strip()
        if len(text) > self.limits.max_text_chars:
            raise InvalidArgument(
                field_name, f"is {len(text)} characters; the limit is {self.limits.max_text_chars}"
            )
        return text

    @staticmethod
    def _check_id(item_id: str, used: set[str], field_name: str) -> None:
        if not ITEM_ID_RE.fullmatch(item_id):
            raise InvalidArgument(
                field_name, "must be 1-64 characters of letters, digits, '.', '_', '-'"
            )
        if item_id in used:
            raise InvalidArgument(field_name, f"{item_id!r} is already used")

    def _item(self, item_id: str, spec: PlanItemSpec, field_name: str) -> PlanItem:
        return PlanItem(
            id=item_id,
            title=self._title(spec.title, f"{field_name}.title"),
            detail=self._text(spec.detail, f"{field_name}.detail"),
        )

    def _cap(self, count: int) -> None:
        if count > self.limits.max_items:
            raise LimitExceeded(
                "plan.max_items",
                self.limits.max_items,
                f"a plan holds at most {self.limits.max_items} items (plan.max_items)",
            )

    @staticmethod
    def _require(plan: Plan | None) -> Plan:
        if plan is None:
            raise FailedPrecondition("the context has no plan; create one first")
        return copy.deepcopy(plan)

    @staticmethod
    def _find(plan: Plan, item_id: str, field_name: str) -> PlanItem:
        if not isinstance(item_id, str) or not item_id:
            raise InvalidArgument(field_name, "must name a plan item")
        item = plan.item(item_id)
        if item is None:
            known = ", ".join(i.id for i in plan.items) or "none"
            raise NotFound(f"{field_name}: no plan item {item_id!r} (items: {known})")
        return item

    # -- operations -------------------------------------------------------------------------
    def create(self, goal: str, items: Sequence[PlanItemSpec | str]) -> Plan:
        """A new plan replacing any current one; the first item starts in_progress."""
        text = goal.strip() if isinstance(goal, str) else ""
        if not text:
            raise InvalidArgument("create.goal", "must not be empty")
        goal_text = self._text(text, "create.goal")
        self._cap(len(items))
        specs = [PlanItemSpec(s) if isinstance(s, str) else s for s in items]
        # Caller ids are reserved first so a generated id never takes one a later spec asks for.
        reserved: set[str] = set()
        for n, spec in enumerate(specs):
            if spec.id:
                self._check_id(spec.id, reserved, f"create.items[{n}].id")
                reserved.add(spec.id)
        built: list[PlanItem] = []
        for n, spec in enumerate(specs):
            item_id = spec.id or _next_id(reserved)
            reserved.add(item_id)
            built.append(self._item(item_id, spec, f"create.items[{n}]"))
        if built:
            built[0].status = PlanStatus.IN_PROGRESS
        return Plan(goal=goal_text, items=built, updated_ms=self._now_ms())

    def update(
        self,
        plan: Plan | None,
        item_id: str,
        *,
        status: PlanStatus | str | None = None,
        note: str | None = None,
        title: str | None = None,
        detail: str | None = None,
        bind: Binding | None = None,
        unbind: bool = False,
    ) -> Plan:
        """Edit one item; only the arguments given change. Empty note/detail clears it."""
        new = self._require(plan)
        item = self._find(new, item_id, "update.item_id")
        if (
            status is None
            and note is None
            and title is None
            and detail is None
            and bind is None
            and not unbind
        ):
            raise InvalidArgument(
                "update", "nothing to change: give a status, note, title, detail or bind"
            )
        if bind is not None and unbind:
            raise InvalidArgument("update.bind", "cannot bind and unbind in one update")
        target = parse_status(status, "update.status") if status is not None else None
        if title is not None:
            item.title = self._title(title, "update.title")
        if detail is not None:
            item.detail = self._text(detail, "update.detail")
        if note is not None:
            item.note = self._text(note, "update.note")
        if bind is not None:
            bind = parse_binding(bind.kind, bind.id, "update.bind")
            if item.status in FINISHED:
                raise FailedPrecondition(
                    f"plan item {item.id!r} is {item.status.value}; reopen it (status pending) "
                    "before binding it"
                )
            holder = next(
                (i for i in new.items if i is not item and i.bound == bind and i.status in OPEN),
                None,
            )
            if holder is not None:
                raise FailedPrecondition(f"{bind} is already bound to open plan item {holder.id!r}")
            item.bound = bind
            if target is None and item.status in {PlanStatus.PENDING, PlanStatus.BLOCKED}:
                target = PlanStatus.IN_PROGRESS
        if unbind:
            item.bound = None
        if target is not None and target is not item.status:
            if target not in TRANSITIONS[item.status]:
                allowed = ", ".join(sorted(s.value for s in TRANSITIONS[item.status]))
                raise FailedPrecondition(
                    f"plan item {item.id!r} cannot go from {item.status.value} to "
                    f"{target.value}; allowed: {allowed}"
                )
            item.status = target
        new.updated_ms = self._now_ms()
        return new

    def insert(self, plan: Plan | None, spec: PlanItemSpec, position: int | None = None) -> Plan:
        """Add a pending item at ``position`` (0-based; None or past the end appends)."""
        new = self._require(plan)
        if position is not None and position < 0:
            raise InvalidArgument("insert.position", "must be 0 or more")
        self._cap(len(new.items) + 1)
        used = {i.id for i in new.items}
        if spec.id:
            self._check_id(spec.id, used, "insert.item.id")
        item = self._item(spec.id or _next_id(used), spec, "insert.item")
        at = len(new.items) if position is None else min(position, len(new.items))
        new.items.insert(at, item)
        new.updated_ms = self._now_ms()
        return new

    def move(self, plan: Plan | None, item_id: str, position: int) -> Plan:
        """Move an item to ``position`` (0-based; past the end moves it last)."""
        new = self._require(plan)
        item = self._find(new, item_id, "move.item_id")
        if position < 0:
            raise InvalidArgument("move.position", "must be 0 or more")
        new.items.remove(item)
        new.items.insert(min(position, len(new.items)), item)
        new.updated_ms = self._now_ms()
        return new

    def report_run(
        self,
        plan: Plan | None,
        binding: Binding,
        outcome: RunOutcome | str,
        reason: str = "",
    ) -> RunReport:
        """Settle the item bound to ``binding`` and advance the plan (see module doc)."""
        binding = parse_binding(binding.kind, binding.id, "binding")
        try:
            result = RunOutcome(outcome)
        except ValueError:
            allowed = ", ".join(o.value for o in RunOutcome)
            raise InvalidArgument(
                "outcome", f"unknown outcome {outcome!r}; use one of {allowed}"
            ) from None
        reason_text = self._text(reason, "reason")
        new = self._require(plan)
        target = PlanStatus.DONE if result is RunOutcome.SUCCEEDED else PlanStatus.BLOCKED
        note = reason_text or (
            f"{binding.kind.value} {result.value}" if target is PlanStatus.BLOCKED else ""
        )
        item = next(
            (
                i
                for i in new.items
                if i.bound == binding and i.status in {PlanStatus.PENDING, PlanStatus.IN_PROGRESS}
            ),
            None,
        )
        if item is None:
            settled = [i for i in new.items if i.bound == binding]
            repeat = next((i for i in settled if i.status is target), None)
            if repeat is not None:
                return RunReport(
                    plan=copy.deepcopy(plan), item_id=repeat.id, advanced_id=None, changed=False
                )
            if settled:
                raise FailedPrecondition(
                    f"plan item {settled[0].id!r} bound to {binding} is already "
                    f"{settled[0].status.value}"
                )
            raise NotFound(f"binding: no plan item is bound to {binding}")
        item.status = target
        if target is PlanStatus.BLOCKED or reason_text:
            item.note = note
        index = new.items.index(item)
        following = new.items[index + 1 :] + new.items[:index]
        advanced = next((i for i in following if i.status is PlanStatus.PENDING), None)
        if advanced is not None:
            advanced.status = PlanStatus.IN_PROGRESS
        new.updated_ms = self._now_ms()
        return RunReport(
            plan=new,
            item_id=item.id,
            advanced_id=advanced.id if advanced else None,
            changed=True,
        )

    @staticmethod
    def clear(plan: Plan | None) -> None:
        """Remove the plan (the record stores ``None``); clearing no plan is fine."""
        return None


def _next_id(used: set[str]) -> str:
    """The lowest free ``s<n>``: a fresh plan reads s1, s2, ..."""
    n = 1
    while f"s{n}" in used:
        n += 1
    return f"s{n}"


# -- preflight ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Preflight:
    """A validated preflight verdict: the text as sent and its parsed object."""

    json_text: str
    value: dict[str, Any]


def validate_preflight(
    verdict_json: str,
    *,
    max_bytes: int = 16 * 1024,
    max_depth: int = 32,
    field_name: str = "verdict_json",
) -> Preflight:
    """Check a preflight verdict: a JSON object, strict, within the size cap.

    Strict means the one JSON rule (:mod:`sidecar.core.jsonvalue`) and no
    duplicate keys, numbers within a double's range. The text is kept as sent (key order is the
    caller's); the size cap counts its UTF-8 bytes.
    """
    if not isinstance(verdict_json, str) or not verdict_json.strip():
        raise InvalidArgument(field_name, 'must be a JSON object, e.g. {"intent": "..."}')
    size = len(verdict_json.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise LimitExceeded(
            "plan.max_preflight_bytes",
            max_bytes,
            f"{field_name} is {size} bytes; the limit is {max_bytes} (plan.max_preflight_bytes)",
        )
    value = parse_json(verdict_json, field=field_name, max_depth=max_depth, strict=True)
    if not isinstance(value, dict):
        kind = "an array" if isinstance(value, list) else "a scalar"
        raise InvalidArgument(field_name, f"must be a JSON object, not {kind}")
    return Preflight(json_text=verdict_json, value=value)
