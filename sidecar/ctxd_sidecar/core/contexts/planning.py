"""Plan and preflight changes to a context, as versioned log records.

Two record kinds (declared in :mod:`.ops`):

* ``plan``: ``plan`` = the whole plan after the change (its JSON form), or
  ``null`` when it was cleared. The plan is small (capped items), so storing
  the result rather than the edit keeps replay trivially deterministic: the
  edit's validation, generated ids and ``updated_ms`` were decided before
  the record was written.
* ``preflight``: ``json`` = the verdict text as sent (validated).

The rules of the plan itself live in :mod:`ctxd_sidecar.core.plan`; this module
only runs them under the context's lock and commits the result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ctxd_sidecar.config import PlanConfig
from ctxd_sidecar.core.contexts.model import ContextState
from ctxd_sidecar.core.contexts.service import ContextService
from ctxd_sidecar.core.plan import Binding, Plan, Planner, RunOutcome
from ctxd_sidecar.core.plan.preflight import validate_preflight

#: A plan edit: the current plan (None when there is none) -> the new one.
PlanEdit = Callable[[Planner, Plan | None], Plan | None]


@dataclass(frozen=True)
class PlanUpdate:
    version: int
    plan: Plan | None


@dataclass(frozen=True)
class RunResult:
    version: int
    plan: Plan | None
    item_id: str
    advanced_id: str | None
    changed: bool


class Planning:
    """Plan and preflight operations over a :class:`ContextService`."""

    def __init__(self, contexts: ContextService, config: PlanConfig | None = None) -> None:
        self.contexts = contexts
        self.config = config or PlanConfig()
        # updated_ms follows the contexts clock, so tests that move time move it too.
        self.planner = Planner(self.config, now_ms=contexts.now)

    async def update_plan(
        self, context_id: str, edit: PlanEdit, *, expected_version: int | None = None
    ) -> PlanUpdate:
        """Apply ``edit`` to the context's plan and commit the result (one version)."""

        def build(st: ContextState) -> dict[str, Any]:
            new = edit(self.planner, st.plan)
            return {"op": "plan", "plan": new.to_dict() if new is not None else None}

        st, _ = await self.contexts.change(
            context_id, build, expected_version=expected_version, event="plan"
        )
        return PlanUpdate(st.version, _copy(st.plan))

    async def report_run(
        self, context_id: str, binding: Binding, outcome: RunOutcome | str, reason: str = ""
    ) -> RunResult:
        """Settle the item bound to ``binding`` and advance the plan; a repeated
        report of the same outcome writes nothing."""
        report = None

        def build(st: ContextState) -> dict[str, Any] | None:
            nonlocal report
            report = self.planner.report_run(st.plan, binding, outcome, reason)
            if not report.changed:
                return None
            return {"op": "plan", "plan": report.plan.to_dict()}

        st, _ = await self.contexts.change(context_id, build, event="plan")
        assert report is not None
        return RunResult(
            st.version, _copy(st.plan), report.item_id, report.advanced_id, report.changed
        )

    async def set_preflight(
        self, context_id: str, verdict_json: str, *, expected_version: int | None = None
    ) -> int:
        """Store a validated preflight verdict; returns the new version."""
        verdict = validate_preflight(verdict_json, max_bytes=self.config.max_preflight_bytes)

        def build(_st: ContextState) -> dict[str, Any]:
            return {"op": "preflight", "json": verdict.json_text}

        st, _ = await self.contexts.change(
            context_id, build, expected_version=expected_version, event="preflight"
        )
        return st.version


def _copy(plan: Plan | None) -> Plan | None:
    """A detached copy (the record's plan may change once the lock is released)."""
    return Plan.from_dict(plan.to_dict()) if plan is not None else None
