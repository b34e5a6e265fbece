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

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ctxd_sidecar.core.errors import InvalidArgument

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


def has_control(text: str) -> bool:
    return any(ord(c) < 32 or ord(c) == 127 for c in text)


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
    if len(binding_id) > MAX_BINDING_ID_CHARS or has_control(binding_id):
        raise InvalidArgument(
            f"{field_name}.id",
            f"must be at most {MAX_BINDING_ID_CHARS} characters without control characters",
        )
    return Binding(parsed, binding_id)
