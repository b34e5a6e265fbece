"""kill -9 at random moments while a client edits a context's plan, on LMDB
and S3: every acknowledged plan change survives, the version counts each
change exactly once, and a client that retries with expected_version never
applies a change twice."""

from __future__ import annotations

import random
import threading
import time

import grpc
import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.api.ctxd.v1 import context_pb2_grpc
from tests.conftest import FAST_RECONNECT
from tests.support.crashloop import crash_runs, kill_while_working

KILLS = 10
BUDGET = 30.0
CID = "planned"
MAX_ITEMS = 8
RETRYABLE = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.UNKNOWN,
}


def plan_of(stub) -> tuple[int, pb.Plan]:
    ctx = stub.GetContext(
        pb.GetContextRequest(context_id=CID), timeout=5, wait_for_ready=True
    ).context
    return ctx.version, ctx.plan


class Planner(threading.Thread):
    """Inserts items i1, i2, ... up to MAX_ITEMS, then rewrites notes; every
    op carries the version it was made against. After a lost answer it reads
    the plan back: if the op is there, it was applied (at version + 1)."""

    def __init__(self, address: str, version: int, seed: int) -> None:
        super().__init__(daemon=True)
        self.address = address
        self.rng = random.Random(seed)
        self.version = version
        #: acknowledged state: item ids in order and each item's note
        self.items: list[str] = []
        self.notes: dict[str, str] = {}
        self.in_flight: tuple[str, str, str] | None = None
        self.ops = 0
        self.retries = 0
        self.recovered = 0
        self.error: str | None = None
        self.stop = threading.Event()

    def request(self, n: int) -> tuple[pb.UpdatePlanRequest, tuple[str, str, str]]:
        if len(self.items) < MAX_ITEMS:
            item = f"i{n}"
            req = pb.UpdatePlanRequest(
                context_id=CID,
                insert=pb.PlanInsert(item=pb.PlanItemSpec(id=item, title=f"step {n}"), position=99),
                expected_version=self.version,
            )
            return req, ("insert", item, "")
        item = self.rng.choice(self.items)
        note = f"note {n}"
        req = pb.UpdatePlanRequest(
            context_id=CID,
            update=pb.PlanUpdate(item_id=item, note=note),
            expected_version=self.version,
        )
        return req, ("note", item, note)

    def applied(self, plan: pb.Plan, op: tuple[str, str, str]) -> bool:
        kind, item, note = op
        by_id = {i.id: i for i in plan.items}
        if kind == "insert":
            return item in by_id
        return by_id[item].note == note

    def run(self) -> None:
        channel = grpc.insecure_channel(self.address, options=FAST_RECONNECT)
        stub = context_pb2_grpc.ContextServiceStub(channel)
        n = 0
        try:
            while not self.stop.is_set():
                n += 1
                req, op = self.request(n)
                self.in_flight = op
                interrupted = False
                while not self.stop.is_set():
                    try:
                        resp = stub.UpdatePlan(req, timeout=5, wait_for_ready=True)
                    except grpc.RpcError as exc:
                        if exc.code() in RETRYABLE:
                            self.retries += 1
                            interrupted = True
                            time.sleep(0.02)
                            continue
                        if exc.code() == grpc.StatusCode.ABORTED and interrupted:
                            # The lost attempt may have been applied: look.
                            try:
                                version, plan = plan_of(stub)
                            except grpc.RpcError as again:
                                if again.code() in RETRYABLE:
                                    continue
                                raise
                            if version == self.version + 1 and self.applied(plan, op):
                                self.recovered += 1
                                self._ack(op, version)
                                break
                        self.error = f"{exc.code()}: {exc.details()}"
                        return
                    assert resp.version == self.version + 1
                    self._ack(op, resp.version)
                    break
        finally:
            channel.close()

    def _ack(self, op: tuple[str, str, str], version: int) -> None:
        kind, item, note = op
        if kind == "insert":
            self.items.append(item)
            self.notes[item] = ""
        else:
            self.notes[item] = note
        self.version = version
        self.in_flight = None
        self.ops += 1


def check(stub, planner: Planner, base: int, seed: int) -> None:
    version, plan = plan_of(stub)
    ids = [i.id for i in plan.items]
    notes = {i.id: i.note for i in plan.items}
    acked = (planner.items, planner.notes, planner.version)
    if version == planner.version:
        assert (ids, notes) == (planner.items, planner.notes), f"seed {seed}: {acked}"
    else:
        # The op in flight at the end landed without its answer.
        assert version == planner.version + 1 and planner.in_flight is not None, f"seed {seed}"
        assert planner.applied(plan, planner.in_flight), f"seed {seed}"
    assert version - base >= planner.ops, f"seed {seed}: an acknowledged change is missing"


@pytest.mark.parametrize(("backend", "kills"), crash_runs(["lmdb", "s3"], KILLS))
def test_kill_9_during_plan_updates_loses_no_acknowledged_change(
    spawn_sidecar, store_uri_for, backend, kills
):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    sc = spawn_sidecar("--store", store_uri_for(backend), "--set", "contexts.checkpoint_every=3")
    stub = sc.running().contexts
    stub.AppendTurn(
        pb.AppendTurnRequest(
            context_id=CID, messages=[pb.Message(user=pb.UserMessage(text="plan it"))]
        ),
        timeout=30,
    )
    created = stub.UpdatePlan(
        pb.UpdatePlanRequest(context_id=CID, create=pb.PlanCreate(goal="survive kills")), timeout=30
    )
    base = created.version
    planner = Planner(sc.address, base, seed)
    planner.start()
    made = 0
    try:
        made = kill_while_working(
            sc, lambda: planner.ops, planner.is_alive, rng, kills=kills, budget=BUDGET
        )
        time.sleep(0.2)
    finally:
        planner.stop.set()
        planner.join(30)
    assert planner.error is None, f"seed {seed}: {planner.error}"
    assert planner.retries > 0, "no kill interrupted a call"
    assert planner.ops > made, f"seed {seed}: too few changes acknowledged ({planner.ops})"
    check(sc.running().contexts, planner, base, seed)
    sc.kill()
    sc.start(timeout=60)
    check(sc.running().contexts, planner, base, seed)
    print(
        f"\nplan crash loop on {backend}: {made} kills, {planner.ops} acknowledged changes, "
        f"{planner.retries} retries, {planner.recovered} recovered by reading back (seed {seed})"
    )
