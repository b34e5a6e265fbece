"""The work plan of a context: its items and bindings (:mod:`.model`), the
rules that change it (:mod:`.rules`) and the preflight verdict
(:mod:`.preflight`). No gRPC and no store here; the use case that commits
plan changes is :mod:`ctxd_sidecar.core.contexts.planning`."""

from ctxd_sidecar.core.plan.model import (
    TRANSITIONS,
    Binding,
    BindingKind,
    Plan,
    PlanItem,
    PlanItemSpec,
    PlanStatus,
    RunOutcome,
    RunReport,
    parse_binding,
    parse_status,
)
from ctxd_sidecar.core.plan.preflight import Preflight, validate_preflight
from ctxd_sidecar.core.plan.rules import Planner

__all__ = [
    "Binding",
    "BindingKind",
    "Plan",
    "PlanItem",
    "PlanItemSpec",
    "PlanStatus",
    "Planner",
    "Preflight",
    "RunOutcome",
    "RunReport",
    "TRANSITIONS",
    "parse_binding",
    "parse_status",
    "validate_preflight",
]
