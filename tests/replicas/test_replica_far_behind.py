"""A replica any number of versions behind a delete: it either sees every
acknowledged change or refuses with a retryable status — it never serves the
deleted transcript, never acknowledges a turn that is then lost, never
reports deleted=true while a conversation remains.

B holds a copy at version 1; A appends ``behind`` more turns, deletes (a
fence), and (for most steps) starts the id afresh; then B reads, reads
incrementally, appends, deletes or watches. Once before A's purge (B's copy
recently confirmed, every old version still taken) and once after it (the
fence hold over, the old incarnation's keys gone). Real ``ctxd serve``
processes on one moto S3 server over HTTP, with and without LIST.
"""

from __future__ import annotations

import queue
import threading
import time

import grpc
import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from tests.support.contexts import append, full, rpc_error, texts, user

#: Seconds A holds a deletion's fence (and every record of the incarnation).
HOLD = 3.0
BEHIND = [1, 2, 5, 50]


def slice_of(c, cid: str, **kw) -> pb.GetContextResponse:
    return c.GetContext(pb.GetContextRequest(context_id=cid, view=pb.CONTEXT_VIEW_SLICE, **kw))


class Scenario:
    """Two replicas on one store, and the steps every case shares."""

    def __init__(self, a, b) -> None:
        self.a, self.b = a.contexts, b.contexts
        self.n = 0

    def deleted_behind_b(self, behind: int) -> tuple[str, str]:
        """A context B holds at version 1 while A took it ``behind`` versions
        further and deleted it. Returns the id and B's held incarnation."""
        self.n += 1
        cid = f"far{self.n}"
        append(self.a, cid, user("old 0"))
        held = slice_of(self.b, cid)  # B's copy: version 1, just confirmed
        assert held.info.version == 1
        for i in range(behind):
            append(self.a, cid, user(f"old {i + 1}"))
        assert self.a.DeleteContext(pb.DeleteContextRequest(context_id=cid)).deleted
        return cid, held.info.incarnation

    def recreate(self, cid: str) -> None:
        append(self.a, cid, user("new 0"))


def check_read_of_deleted(s: Scenario, cid: str, incarnation: str) -> None:
    assert rpc_error(full, s.b, cid).code() == grpc.StatusCode.NOT_FOUND


def check_read(s: Scenario, cid: str, incarnation: str) -> None:
    s.recreate(cid)
    assert texts(full(s.b, cid)) == ["new 0"]


def check_incremental_read(s: Scenario, cid: str, incarnation: str) -> None:
    s.recreate(cid)
    inc = slice_of(s.b, cid, since_version=1, since_incarnation=incarnation)
    assert inc.change == pb.SLICE_CHANGE_REPLACE
    assert [m.user.text for m in inc.slice] == ["new 0"]


def check_append(s: Scenario, cid: str, incarnation: str) -> None:
    s.recreate(cid)
    acked = [append(s.b, cid, user(f"b {i}")).version for i in range(3)]
    assert acked == [2, 3, 4]
    for c in (s.a, s.b):
        assert texts(full(c, cid)) == ["new 0", "b 0", "b 1", "b 2"]


def check_delete(s: Scenario, cid: str, incarnation: str) -> None:
    s.recreate(cid)
    assert s.b.DeleteContext(pb.DeleteContextRequest(context_id=cid)).deleted
    for c in (s.a, s.b):
        assert rpc_error(full, c, cid).code() == grpc.StatusCode.NOT_FOUND


CHECKS = [check_read_of_deleted, check_read, check_incremental_read, check_append, check_delete]


BACKENDS = ["s3", "s3-nolist", "postgres"]


@pytest.fixture(params=BACKENDS)
def scenario(request, spawn_sidecar, store_uri_for):
    uri = store_uri_for(request.param)
    hold = ("--set", f"contexts.fence_hold={HOLD}")
    a = spawn_sidecar("--store", uri, *hold).running()
    b = spawn_sidecar("--store", uri, *hold).running()
    return Scenario(a, b)


def test_a_far_behind_replica_before_the_purge(scenario):
    """B's copy was confirmed a moment ago; every old version is still taken."""
    for behind in BEHIND:
        for check in CHECKS:
            cid, incarnation = scenario.deleted_behind_b(behind)
            try:
                check(scenario, cid, incarnation)
            except AssertionError as exc:
                raise AssertionError(f"{check.__name__}, {behind} behind: {exc}") from exc


def test_a_far_behind_replica_after_the_purge(scenario):
    """The fence hold is over and the old incarnation's keys are gone."""
    cases = [
        (behind, check, *scenario.deleted_behind_b(behind)) for behind in BEHIND for check in CHECKS
    ]
    time.sleep(HOLD + 1.5)  # A's purge runs
    for behind, check, cid, incarnation in cases:
        try:
            check(scenario, cid, incarnation)
        except AssertionError as exc:
            raise AssertionError(f"{check.__name__}, {behind} behind: {exc}") from exc


def test_a_watcher_on_a_far_behind_replica_sees_every_change(scenario):
    s = scenario
    for behind in BEHIND:
        s.n += 1
        cid = f"watched{s.n}"
        append(s.a, cid, user("old 0"))
        assert slice_of(s.b, cid).info.version == 1
        events: queue.Queue = queue.Queue()
        call = s.b.WatchContext(pb.WatchContextRequest(context_id=cid))

        def read(call=call, events=events) -> None:
            try:
                for ev in call:
                    events.put((ev.kind, ev.version))
            except grpc.RpcError:
                pass

        threading.Thread(target=read, daemon=True).start()
        time.sleep(0.5)  # let the subscription start (events before it are not streamed)
        for i in range(behind):
            append(s.a, cid, user(f"old {i + 1}"))
        assert s.a.DeleteContext(pb.DeleteContextRequest(context_id=cid)).deleted
        seen: list[tuple[int, int]] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (
            not seen or seen[-1][0] != pb.CONTEXT_EVENT_KIND_DELETED
        ):
            try:
                seen.append(events.get(timeout=1))
            except queue.Empty:
                pass
        call.cancel()
        turns = [v for k, v in seen if k == pb.CONTEXT_EVENT_KIND_TURN]
        # Every turn from the first one streamed on, none skipped or repeated
        # (a turn committed before the stream subscribed is not streamed).
        first = turns[0] if turns else behind + 2
        assert turns == list(range(first, behind + 2)), (behind, seen)
        assert seen and seen[-1] == (pb.CONTEXT_EVENT_KIND_DELETED, behind + 2), (behind, seen)
