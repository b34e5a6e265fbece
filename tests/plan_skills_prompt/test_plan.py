"""Plan operations, ReportRun auto-advance, transitions, and preflight validation."""

from __future__ import annotations

import json

import pytest

from ctxd_sidecar.config import PlanConfig
from ctxd_sidecar.config.loader import load_config
from ctxd_sidecar.core.errors import FailedPrecondition, InvalidArgument, LimitExceeded, NotFound
from ctxd_sidecar.core.plan import (
    TRANSITIONS,
    Binding,
    BindingKind,
    Plan,
    PlanItemSpec,
    Planner,
    PlanStatus,
    RunOutcome,
    validate_preflight,
)

S = PlanStatus


def statuses(plan: Plan) -> list[str]:
    return [i.status.value for i in plan.items]


@pytest.fixture
def planner() -> Planner:
    clock = iter(range(1000, 10**6))
    return Planner(PlanConfig(max_items=5), now_ms=lambda: next(clock))


def test_create_starts_first_item_and_generates_ids(planner):
    plan = planner.create(
        "  Ship the release  ",
        ["Write notes", PlanItemSpec("Tag", detail="v1.2"), PlanItemSpec("Announce", id="s1x")],
    )
    assert plan.goal == "Ship the release"
    assert [i.id for i in plan.items] == ["s1", "s2", "s1x"]
    assert statuses(plan) == ["in_progress", "pending", "pending"]
    assert plan.items[1].detail == "v1.2"
    assert plan.updated_ms == 1000


def test_generated_ids_skip_caller_ids_anywhere_in_the_list(planner):
    plan = planner.create("g", ["a", PlanItemSpec("b", id="s1"), "c"])
    assert [i.id for i in plan.items] == ["s2", "s1", "s3"]


@pytest.mark.parametrize(
    ("goal", "items", "field"),
    [
        ("", ["a"], "create.goal"),
        ("g", [""], "create.items[0].title"),
        ("g", ["a", PlanItemSpec("b", id="bad id")], "create.items[1].id"),
        ("g", [PlanItemSpec("a", id="x"), PlanItemSpec("b", id="x")], "create.items[1].id"),
        ("g", ["two\nlines"], "create.items[0].title"),
        ("g", [PlanItemSpec("a", detail="d" * 5000)], "create.items[0].detail"),
    ],
)
def test_create_rejects_bad_specs(planner, goal, items, field):
    with pytest.raises(InvalidArgument) as err:
        planner.create(goal, items)
    assert err.value.field == field


def test_cap_on_create_and_insert(planner):
    with pytest.raises(LimitExceeded) as err:
        planner.create("g", ["a"] * 6)
    assert err.value.limit == "plan.max_items" and err.value.value == 5
    plan = planner.create("g", ["a"] * 5)
    with pytest.raises(LimitExceeded):
        planner.insert(plan, PlanItemSpec("f"))
    assert len(plan.items) == 5


def test_operations_need_a_plan(planner):
    with pytest.raises(FailedPrecondition):
        planner.update(None, "s1", status="done")
    with pytest.raises(FailedPrecondition):
        planner.insert(None, PlanItemSpec("a"))


def test_update_fields_and_unknown_item(planner):
    plan = planner.create("g", ["a", "b"])
    new = planner.update(plan, "s2", title="  B  ", detail="more", note="waiting on CI")
    assert (new.items[1].title, new.items[1].detail, new.items[1].note) == (
        "B",
        "more",
        "waiting on CI",
    )
    assert plan.items[1].title == "b", "the input plan is never modified"
    cleared = planner.update(new, "s2", note="", detail="")
    assert (cleared.items[1].note, cleared.items[1].detail) == ("", "")
    with pytest.raises(NotFound, match="s9"):
        planner.update(plan, "s9", status="done")
    with pytest.raises(InvalidArgument) as err:
        planner.update(plan, "s1")
    assert err.value.field == "update"
    with pytest.raises(InvalidArgument) as err:
        planner.update(plan, "s1", status="finished")
    assert err.value.field == "update.status"
    with pytest.raises(InvalidArgument) as err:
        planner.update(plan, "s1", title=" ")
    assert err.value.field == "update.title"


ALL = list(PlanStatus)


@pytest.mark.parametrize("source", ALL)
@pytest.mark.parametrize("target", ALL)
def test_transition_table(planner, source, target):
    plan = planner.create("g", ["a"])
    plan.items[0].status = source
    allowed = target is source or target in TRANSITIONS[source]
    if allowed:
        assert planner.update(plan, "s1", status=target).items[0].status is target
    else:
        with pytest.raises(FailedPrecondition, match="allowed: pending"):
            planner.update(plan, "s1", status=target)
        assert plan.items[0].status is source


def test_finished_items_only_reopen_to_pending(planner):
    plan = planner.create("g", ["a", "b"])
    done = planner.update(plan, "s1", status=S.DONE)
    with pytest.raises(FailedPrecondition):
        planner.update(done, "s1", status=S.IN_PROGRESS)
    reopened = planner.update(done, "s1", status=S.PENDING)
    assert planner.update(reopened, "s1", status=S.IN_PROGRESS).items[0].status is S.IN_PROGRESS


def test_bind_moves_pending_to_in_progress_and_is_unique(planner):
    plan = planner.create("g", ["a", "b", "c"])
    run = Binding(BindingKind.RUN, "run-7")
    bound = planner.update(plan, "s2", bind=run)
    assert bound.items[1].bound == run and bound.items[1].status is S.IN_PROGRESS
    with pytest.raises(FailedPrecondition, match="s2"):
        planner.update(bound, "s3", bind=run)
    # An explicit status wins over the implicit one.
    explicit = planner.update(plan, "s3", bind=Binding(BindingKind.TASK, "t1"), status=S.PENDING)
    assert explicit.items[2].status is S.PENDING
    done = planner.update(plan, "s3", status=S.DONE)
    with pytest.raises(FailedPrecondition, match="reopen"):
        planner.update(done, "s3", bind=run)
    with pytest.raises(InvalidArgument) as err:
        planner.update(plan, "s3", bind=Binding("job", "x"))  # type: ignore[arg-type]
    assert err.value.field == "update.bind.kind"
    with pytest.raises(InvalidArgument) as err:
        planner.update(plan, "s3", bind=Binding(BindingKind.RUN, ""))
    assert err.value.field == "update.bind.id"
    assert planner.update(bound, "s2", unbind=True).items[1].bound is None


def test_insert_and_move(planner):
    plan = planner.create("g", ["a", "b"])
    plan = planner.insert(plan, PlanItemSpec("first", id="zero"), 0)
    plan = planner.insert(plan, PlanItemSpec("last"), 99)
    assert [i.id for i in plan.items] == ["zero", "s1", "s2", "s3"]
    assert plan.items[0].status is S.PENDING
    with pytest.raises(InvalidArgument) as err:
        planner.insert(plan, PlanItemSpec("dup", id="s1"))
    assert err.value.field == "insert.item.id"
    with pytest.raises(InvalidArgument) as err:
        planner.insert(plan, PlanItemSpec("x"), -1)
    assert err.value.field == "insert.position"
    moved = planner.move(plan, "zero", 10)
    assert [i.id for i in moved.items] == ["s1", "s2", "s3", "zero"]
    moved = planner.move(moved, "s3", 0)
    assert [i.id for i in moved.items] == ["s3", "s1", "s2", "zero"]
    with pytest.raises(NotFound):
        planner.move(plan, "nope", 0)
    with pytest.raises(InvalidArgument) as err:
        planner.move(plan, "s1", -2)
    assert err.value.field == "move.position"


def test_report_run_success_advances_to_next_pending(planner):
    plan = planner.create("g", ["a", "b", "c"])
    run = Binding(BindingKind.RUN, "r1")
    plan = planner.update(plan, "s1", bind=run)
    report = planner.report_run(plan, run, RunOutcome.SUCCEEDED)
    assert report.changed and report.item_id == "s1" and report.advanced_id == "s2"
    assert statuses(report.plan) == ["done", "in_progress", "pending"]
    again = planner.report_run(report.plan, run, "succeeded")
    assert not again.changed and again.item_id == "s1"
    assert statuses(again.plan) == statuses(report.plan)


@pytest.mark.parametrize("outcome", [RunOutcome.FAILED, RunOutcome.CANCELLED])
def test_report_run_failure_blocks_with_reason(planner, outcome):
    plan = planner.create("g", ["a", "b", "c"])
    sub = Binding(BindingKind.SUBAGENT, "researcher")
    plan = planner.update(plan, "s2", bind=sub)
    report = planner.report_run(plan, sub, outcome, reason="quota exceeded")
    assert report.item_id == "s2" and report.advanced_id == "s3"
    assert statuses(report.plan) == ["in_progress", "blocked", "in_progress"]
    assert report.plan.items[1].note == "quota exceeded"
    with pytest.raises(FailedPrecondition, match="already blocked"):
        planner.report_run(report.plan, sub, RunOutcome.SUCCEEDED)


def test_report_run_wraps_to_first_pending_and_unknown_binding(planner):
    plan = planner.create("g", ["a", "b", "c"])
    plan = planner.update(plan, "s1", status=S.PENDING)
    task = Binding(BindingKind.TASK, "t-9")
    plan = planner.update(plan, "s3", bind=task)
    report = planner.report_run(plan, task, RunOutcome.SUCCEEDED)
    assert report.advanced_id == "s1"
    with pytest.raises(NotFound):
        planner.report_run(plan, Binding(BindingKind.TASK, "t-0"), RunOutcome.SUCCEEDED)
    with pytest.raises(InvalidArgument) as err:
        planner.report_run(plan, task, "exploded")
    assert err.value.field == "outcome"


def test_round_trip_through_json(planner):
    plan = planner.create("g", ["a", PlanItemSpec("b", detail="d")])
    plan = planner.update(plan, "s2", bind=Binding(BindingKind.RUN, "r"), note="n")
    data = json.loads(json.dumps(plan.to_dict()))
    assert Plan.from_dict(data) == plan


def test_render_marks_progress_and_bindings(planner):
    plan = planner.create("Release 1.2", ["notes", "tag", "build", "announce", "party"])
    plan = planner.update(plan, "s1", status=S.DONE)
    plan = planner.update(plan, "s2", bind=Binding(BindingKind.RUN, "r1"), detail="v1.2")
    plan = planner.update(plan, "s3", status=S.BLOCKED, note="CI red")
    plan = planner.update(plan, "s4", status=S.SKIPPED)
    assert plan.render() == (
        "Plan (1/5 done): Release 1.2\n"
        "[x] s1. notes\n"
        "[~] s2. tag — v1.2 [run r1]\n"
        "[!] s3. build (CI red)\n"
        "[-] s4. announce\n"
        "[ ] s5. party"
    )


# -- preflight --------------------------------------------------------------------------


def test_preflight_accepts_an_object_and_keeps_the_text():
    text = '{"intent": "deploy", "needs_plan": true, "risk": "low", "skills": ["deploy"]}'
    verdict = validate_preflight(text)
    assert verdict.json_text == text and verdict.value["intent"] == "deploy"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "[1, 2]",
        '"just text"',
        '{"risk": NaN}',
        '{"risk": Infinity}',
        '{"n": 1e999}',
        '{"a": 1, "a": 2}',
        '{"a": 1} trailing',
        "{not json}",
        "[" * 40 + "]" * 40,
    ],
)
def test_preflight_rejects_invalid_json(text):
    with pytest.raises(InvalidArgument) as err:
        validate_preflight(text)
    assert err.value.field == "verdict_json"


def test_preflight_size_cap():
    body = '{"intent": "' + "x" * 100 + '"}'
    validate_preflight(body, max_bytes=len(body))
    with pytest.raises(LimitExceeded) as err:
        validate_preflight(body, max_bytes=len(body) - 1)
    assert err.value.limit == "plan.max_preflight_bytes"


def test_plan_config_from_settings():
    cfg = load_config(env={}, overrides={"plan.max_items": "3"})
    planner = Planner(cfg.plan)
    with pytest.raises(LimitExceeded):
        planner.create("g", ["a"] * 4)
    with pytest.raises(ValueError, match="plan.max_items"):
        load_config(env={}, overrides={"plan.max_items": "0"})
