"""Plan and preflight over gRPC: UpdatePlan, ReportRun, SetPreflight, and
their durability across restarts (checkpointed and replayed from the log)."""

from __future__ import annotations

import json

import grpc
import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb

S = pb  # enum values live on the module


def lmdb_uri(tmp_path) -> str:
    return f"lmdb://{tmp_path / 'data'}?map_size=64MiB"


def new_context(stub, cid: str = "conv-1") -> int:
    r = stub.AppendTurn(
        pb.AppendTurnRequest(
            context_id=cid, messages=[pb.Message(user=pb.UserMessage(text="hello"))]
        )
    )
    return r.version


def create(stub, cid: str, *titles: str, goal: str = "ship it") -> pb.UpdatePlanResponse:
    return stub.UpdatePlan(
        pb.UpdatePlanRequest(
            context_id=cid,
            create=pb.PlanCreate(goal=goal, items=[pb.PlanItemSpec(title=t) for t in titles]),
        )
    )


def update(stub, cid: str, item_id: str, **fields) -> pb.UpdatePlanResponse:
    return stub.UpdatePlan(
        pb.UpdatePlanRequest(context_id=cid, update=pb.PlanUpdate(item_id=item_id, **fields))
    )


def statuses(plan: pb.Plan) -> list[tuple[str, str]]:
    return [
        (i.id, pb.PlanItemStatus.Name(i.status).removeprefix("PLAN_ITEM_STATUS_"))
        for i in plan.items
    ]


def rpc_error(fn, *args, **kwargs) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        fn(*args, **kwargs)
    return info.value


@pytest.fixture
def ctx(start_sidecar, tmp_path):
    sc = start_sidecar(lmdb_uri(tmp_path))
    stub = sc.contexts
    new_context(stub)
    return stub


def test_create_update_insert_move_bind_and_report_run_advance(ctx):
    r = create(ctx, "conv-1", "read code", "write fix", "run tests")
    assert r.version == 2
    assert statuses(r.plan) == [("s1", "IN_PROGRESS"), ("s2", "PENDING"), ("s3", "PENDING")]
    assert r.plan.goal == "ship it"

    r = update(ctx, "conv-1", "s1", note="looked at storage.py", title="read the code")
    assert r.version == 3
    assert r.plan.items[0].note == "looked at storage.py"
    assert r.plan.items[0].title == "read the code"
    # UNSPECIFIED status means "unchanged".
    assert r.plan.items[0].status == S.PLAN_ITEM_STATUS_IN_PROGRESS

    r = ctx.UpdatePlan(
        pb.UpdatePlanRequest(
            context_id="conv-1",
            insert=pb.PlanInsert(item=pb.PlanItemSpec(id="review", title="review"), position=2),
        )
    )
    assert [i.id for i in r.plan.items] == ["s1", "s2", "review", "s3"]
    r = ctx.UpdatePlan(
        pb.UpdatePlanRequest(context_id="conv-1", move=pb.PlanMove(item_id="review", position=99))
    )
    assert [i.id for i in r.plan.items] == ["s1", "s2", "s3", "review"]
    assert r.version == 5

    r = update(ctx, "conv-1", "s1", status=S.PLAN_ITEM_STATUS_DONE)
    # Binding a pending item starts it.
    r = update(ctx, "conv-1", "s2", bind=pb.PlanBinding(kind=S.BINDING_KIND_RUN, id="run-7"))
    assert statuses(r.plan)[1] == ("s2", "IN_PROGRESS")
    assert r.plan.items[1].bound.kind == S.BINDING_KIND_RUN
    assert r.plan.items[1].bound.id == "run-7"

    rep = ctx.ReportRun(
        pb.ReportRunRequest(
            context_id="conv-1",
            binding=pb.PlanBinding(kind=S.BINDING_KIND_RUN, id="run-7"),
            outcome=S.RUN_OUTCOME_SUCCEEDED,
        )
    )
    assert rep.item_id == "s2"
    assert rep.version == r.version + 1
    assert statuses(rep.plan) == [
        ("s1", "DONE"),
        ("s2", "DONE"),
        ("s3", "IN_PROGRESS"),
        ("review", "PENDING"),
    ]
    # The same report again is a no-op (retries are safe): no new version.
    again = ctx.ReportRun(
        pb.ReportRunRequest(
            context_id="conv-1",
            binding=pb.PlanBinding(kind=S.BINDING_KIND_RUN, id="run-7"),
            outcome=S.RUN_OUTCOME_SUCCEEDED,
        )
    )
    assert again.version == rep.version and again.item_id == "s2"

    update(ctx, "conv-1", "s3", bind=pb.PlanBinding(kind=S.BINDING_KIND_SUBAGENT, id="sub-1"))
    rep = ctx.ReportRun(
        pb.ReportRunRequest(
            context_id="conv-1",
            binding=pb.PlanBinding(kind=S.BINDING_KIND_SUBAGENT, id="sub-1"),
            outcome=S.RUN_OUTCOME_FAILED,
            reason="tests time out",
        )
    )
    assert statuses(rep.plan)[2:] == [("s3", "BLOCKED"), ("review", "IN_PROGRESS")]
    assert rep.plan.items[2].note == "tests time out"

    got = ctx.GetContext(pb.GetContextRequest(context_id="conv-1"))
    assert got.context.version == rep.version
    assert statuses(got.context.plan) == statuses(rep.plan)

    r = ctx.UpdatePlan(pb.UpdatePlanRequest(context_id="conv-1", clear=pb.PlanClear()))
    assert r.version == rep.version + 1
    assert not r.HasField("plan")
    assert not ctx.GetContext(pb.GetContextRequest(context_id="conv-1")).context.HasField("plan")


def test_invalid_plan_requests_are_refused_and_change_nothing(ctx):
    assert rpc_error(ctx.UpdatePlan, pb.UpdatePlanRequest(context_id="conv-1")).code() == (
        grpc.StatusCode.INVALID_ARGUMENT
    )
    # No plan yet.
    err = rpc_error(update, ctx, "conv-1", "s1", status=S.PLAN_ITEM_STATUS_DONE)
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    r = create(ctx, "conv-1", "a", "b")
    version = r.version

    update(ctx, "conv-1", "s1", status=S.PLAN_ITEM_STATUS_DONE)
    version += 1
    err = rpc_error(update, ctx, "conv-1", "s1", status=S.PLAN_ITEM_STATUS_IN_PROGRESS)
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "done" in err.details() and "pending" in err.details()

    err = rpc_error(update, ctx, "conv-1", "nope", note="x")
    assert err.code() == grpc.StatusCode.NOT_FOUND
    assert "nope" in err.details()

    err = rpc_error(update, ctx, "conv-1", "s2", status=99)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "update.status" in err.details()

    err = rpc_error(update, ctx, "conv-1", "s2", bind=pb.PlanBinding(id="run-1"))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "update.bind.kind" in err.details()

    err = rpc_error(update, ctx, "conv-1", "s2")
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT

    err = rpc_error(
        ctx.ReportRun,
        pb.ReportRunRequest(
            context_id="conv-1", binding=pb.PlanBinding(kind=S.BINDING_KIND_RUN, id="r")
        ),
    )
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "outcome" in err.details()
    err = rpc_error(
        ctx.ReportRun,
        pb.ReportRunRequest(
            context_id="conv-1",
            binding=pb.PlanBinding(kind=S.BINDING_KIND_RUN, id="never-bound"),
            outcome=S.RUN_OUTCOME_SUCCEEDED,
        ),
    )
    assert err.code() == grpc.StatusCode.NOT_FOUND
    err = rpc_error(
        ctx.ReportRun, pb.ReportRunRequest(context_id="conv-1", outcome=S.RUN_OUTCOME_FAILED)
    )
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "binding" in err.details()

    err = rpc_error(
        ctx.UpdatePlan,
        pb.UpdatePlanRequest(
            context_id="conv-1", move=pb.PlanMove(item_id="s2", position=0), expected_version=1
        ),
    )
    assert err.code() == grpc.StatusCode.ABORTED

    err = rpc_error(create, ctx, "missing-ctx", "a")
    assert err.code() == grpc.StatusCode.NOT_FOUND

    got = ctx.GetContext(pb.GetContextRequest(context_id="conv-1")).context
    assert got.version == version
    assert statuses(got.plan) == [("s1", "DONE"), ("s2", "PENDING")]


def test_plan_item_cap(start_sidecar, tmp_path):
    stub = start_sidecar(lmdb_uri(tmp_path), plan__max_items=3).contexts
    new_context(stub)
    err = rpc_error(create, stub, "conv-1", "a", "b", "c", "d")
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    create(stub, "conv-1", "a", "b", "c")
    err = rpc_error(
        stub.UpdatePlan,
        pb.UpdatePlanRequest(
            context_id="conv-1", insert=pb.PlanInsert(item=pb.PlanItemSpec(title="d"))
        ),
    )
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_preflight_valid_invalid_and_too_big(start_sidecar, tmp_path):
    stub = start_sidecar(lmdb_uri(tmp_path), plan__max_preflight_bytes=200).contexts
    v = new_context(stub)
    verdict = json.dumps({"intent": "fix bug", "risk": "low", "steps": [1, 2]})
    r = stub.SetPreflight(pb.SetPreflightRequest(context_id="conv-1", verdict_json=verdict))
    assert r.version == v + 1

    for bad in ("{not json", "[1, 2]", "", '{"a": NaN}', '{"a": 1, "a": 2}'):
        err = rpc_error(
            stub.SetPreflight, pb.SetPreflightRequest(context_id="conv-1", verdict_json=bad)
        )
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, bad
        assert "verdict_json" in err.details()
    big = json.dumps({"x": "y" * 300})
    err = rpc_error(
        stub.SetPreflight, pb.SetPreflightRequest(context_id="conv-1", verdict_json=big)
    )
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    err = rpc_error(
        stub.SetPreflight,
        pb.SetPreflightRequest(context_id="conv-1", verdict_json="{}", expected_version=v),
    )
    assert err.code() == grpc.StatusCode.ABORTED

    got = stub.GetContext(pb.GetContextRequest(context_id="conv-1")).context
    assert got.preflight_json == verdict
    assert got.version == v + 1


def _plan_and_preflight(stub) -> int:
    new_context(stub)
    create(stub, "conv-1", "a", "b", "c")
    update(stub, "conv-1", "s1", bind=pb.PlanBinding(kind=S.BINDING_KIND_TASK, id="t-1"))
    stub.ReportRun(
        pb.ReportRunRequest(
            context_id="conv-1",
            binding=pb.PlanBinding(kind=S.BINDING_KIND_TASK, id="t-1"),
            outcome=S.RUN_OUTCOME_SUCCEEDED,
        )
    )
    return stub.SetPreflight(
        pb.SetPreflightRequest(context_id="conv-1", verdict_json='{"ok": true}')
    ).version


def _assert_restored(stub, version: int) -> None:
    # Listed first, before the record is read whole (a listing reads the head and the log tail).
    listed = {c.id: c for c in stub.ListContexts(pb.ListContextsRequest()).contexts}
    assert listed["conv-1"].version == version
    got = stub.GetContext(pb.GetContextRequest(context_id="conv-1")).context
    assert got.version == version
    assert got.preflight_json == '{"ok": true}'
    assert statuses(got.plan) == [("s1", "DONE"), ("s2", "IN_PROGRESS"), ("s3", "PENDING")]
    assert got.plan.items[0].bound.id == "t-1"
    # The restored plan keeps working: the next step can be reported.
    update(stub, "conv-1", "s2", bind=pb.PlanBinding(kind=S.BINDING_KIND_RUN, id="r-2"))
    rep = stub.ReportRun(
        pb.ReportRunRequest(
            context_id="conv-1",
            binding=pb.PlanBinding(kind=S.BINDING_KIND_RUN, id="r-2"),
            outcome=S.RUN_OUTCOME_SUCCEEDED,
        )
    )
    assert rep.version == version + 2
    assert statuses(rep.plan)[2] == ("s3", "IN_PROGRESS")


def test_plan_and_preflight_survive_a_clean_restart(start_sidecar, tmp_path):
    uri = lmdb_uri(tmp_path)
    first = start_sidecar(uri)
    version = _plan_and_preflight(first.contexts)
    first.stop()
    _assert_restored(start_sidecar(uri).contexts, version)


def test_plan_and_preflight_replay_from_the_log_after_kill(spawn_sidecar, tmp_path):
    """kill -9 before any checkpoint: the records are replayed on restore."""
    args = ["--store", lmdb_uri(tmp_path), "--set", "contexts.checkpoint_every=1000"]
    sc = spawn_sidecar(*args)
    stub = sc.running().contexts
    version = _plan_and_preflight(stub)
    sc.kill()
    _assert_restored(spawn_sidecar(*args).running().contexts, version)
