"""Plan transitions: the :class:`Planner` applies one edit to a plan and
checks it (the types are in :mod:`ctxd_sidecar.core.plan.model`)."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence

from ctxd_sidecar.config import PlanConfig
from ctxd_sidecar.core.errors import FailedPrecondition, InvalidArgument, LimitExceeded, NotFound
from ctxd_sidecar.core.plan.model import (
    FINISHED,
    ITEM_ID_RE,
    OPEN,
    TRANSITIONS,
    Binding,
    Plan,
    PlanItem,
    PlanItemSpec,
    PlanStatus,
    RunOutcome,
    RunReport,
    has_control,
    parse_binding,
    parse_status,
)


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
        if len(title) > self.limits.max_title_chars or "\n" in title or has_control(title):
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
