"""Clients for the replica history check: each call recorded in a
:class:`~tests.support.history.Recorder` with its outcome.

* memory increments: a compare-and-set loop (Get, then Set with the version
  read as ``expected_version``), each value a counter and a unique write id;
* context turns: a LATEST read, then AppendTurn with ``expected_version``
  (each turn's text unique), and now and then a delete (the next turn then
  starts the id afresh);
* LATEST reads of a context on any replica.

Each client makes a fixed number of changes, on a replica chosen at random
per call. A refusal (ABORTED) is a definite "did not happen"; UNAVAILABLE or
a deadline leaves the outcome unknown.
"""

from __future__ import annotations

import json
import math
import random
import threading
from collections.abc import Sequence

import grpc

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.api.ctxd.v1 import memory_pb2 as mpb
from tests.support.history import Recorder

#: Per call: long enough for a store retry, short enough that a lost call
#: does not hold the run up.
CALL_TIMEOUT = 15.0
#: Calls a client makes at most (a guard: each stops after its changes).
MAX_CALLS = 400


def _outcome(exc: grpc.RpcError) -> bool | None:
    """False for a definite refusal, None when the call may have happened."""
    if exc.code() in (grpc.StatusCode.ABORTED, grpc.StatusCode.FAILED_PRECONDITION):
        return False
    return None


def counter_vector(n: int) -> list[mpb.Vector]:
    """The vector each write of counter ``n`` carries: far from its neighbours'
    (cosine of one radian), so Search tells which write a replica holds."""
    return [mpb.Vector(field="n", values=[math.cos(n), math.sin(n)])]


def memory_client(
    rec: Recorder, process: int, key: str, replicas: Sequence, changes: int, seed: int
) -> None:
    """``changes`` acknowledged increments of ``key`` (which must exist)."""
    rng = random.Random(seed)
    done = calls = 0
    while done < changes and calls < MAX_CALLS:
        calls += 2
        stub = rng.choice(replicas).memory
        read = rec.begin(process, key, "read")
        try:
            got = stub.Get(mpb.GetRequest(key=key), timeout=CALL_TIMEOUT).record
        except grpc.RpcError as exc:
            rec.end(read, True if exc.code() == grpc.StatusCode.NOT_FOUND else None)
            continue
        value = json.loads(got.value_json)
        rec.end(read, True, value["w"])
        new = f"p{process}.{calls}"
        stub = rng.choice(replicas).memory
        cas = rec.begin(process, key, "cas", (value["w"], new))
        body = json.dumps({"n": value["n"] + 1, "w": new})
        try:
            stub.Set(
                mpb.SetRequest(
                    key=key,
                    value_json=body,
                    expected_version=got.version,
                    vectors=counter_vector(value["n"] + 1),
                ),
                timeout=CALL_TIMEOUT,
            )
        except grpc.RpcError as exc:
            rec.end(cas, _outcome(exc))
            continue
        rec.end(cas, True)
        done += 1


def create_memory(rec: Recorder, key: str, replica) -> None:
    """Create ``key`` (write id ``w0``), asking again while the outcome is unknown."""
    body = json.dumps({"n": 0, "w": "w0"})
    for _ in range(20):
        op = rec.begin(0, key, "create", "w0")
        try:
            replica.memory.Set(
                mpb.SetRequest(
                    key=key, value_json=body, create_only=True, vectors=counter_vector(0)
                ),
                timeout=CALL_TIMEOUT,
            )
        except grpc.RpcError as exc:
            rec.end(op, _outcome(exc))
            if op.ok is None:
                continue
            return  # refused: an attempt before this one created it
        rec.end(op, True)
        return
    raise AssertionError(f"could not create {key}")


def counter(replica, key: str) -> int:
    """The counter in ``key`` (a read, asked again while the link loses it)."""
    for _ in range(19):
        try:
            got = replica.memory.Get(mpb.GetRequest(key=key), timeout=CALL_TIMEOUT).record
            return json.loads(got.value_json)["n"]
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.UNAVAILABLE:
                raise
    got = replica.memory.Get(mpb.GetRequest(key=key), timeout=CALL_TIMEOUT).record
    return json.loads(got.value_json)["n"]


def vectors_agree(replica, key: str) -> bool:
    """Search on ``replica`` finds ``key`` by the vector of the write it holds
    (the vectors travel with the value), asked again while the link loses it."""
    for _ in range(20):
        try:
            got = replica.memory.Get(mpb.GetRequest(key=key), timeout=CALL_TIMEOUT).record
            query = counter_vector(json.loads(got.value_json)["n"])[0].values
            req = mpb.SearchRequest(prefix=key, query_vector=query, limit=1)
            hits = replica.memory.Search(req, timeout=CALL_TIMEOUT).hits
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.UNAVAILABLE:
                raise
            continue
        if hits and hits[0].record.version == got.version:
            return hits[0].score > 0.9999
    return False


def read_context(
    rec: Recorder, process: int, cid: str, stub, versions: list[int] | None = None
) -> tuple | None | bool:
    """A LATEST read: the turns' texts (None: not found; False: unknown);
    the version read is added to ``versions``."""
    op = rec.begin(process, cid, "get")
    req = pb.GetContextRequest(
        context_id=cid, view=pb.CONTEXT_VIEW_FULL, consistency=pb.READ_CONSISTENCY_LATEST
    )
    try:
        resp = stub.GetContext(req, timeout=CALL_TIMEOUT)
    except grpc.RpcError as exc:
        found = exc.code() == grpc.StatusCode.NOT_FOUND
        rec.end(op, True if found else None)
        return None if found else False
    assert not resp.next_page_token, "keep the contexts short: one page"
    out = tuple(m.user.text for m in resp.context.messages)
    op.version = (resp.info.incarnation, resp.info.version)
    if versions is not None and resp.info.version:
        versions.append(resp.info.version)
    rec.end(op, True, out)
    return out


def read_version(rec: Recorder, process: int, cid: str, stub, version: int) -> None:
    """A read of an earlier version (``get_at``); not kept any more, not
    found or a version the current incarnation has not reached: no answer."""
    op = rec.begin(process, cid, "get_at", version)
    req = pb.GetContextRequest(context_id=cid, view=pb.CONTEXT_VIEW_FULL, at_version=version)
    try:
        resp = stub.GetContext(req, timeout=CALL_TIMEOUT)
    except grpc.RpcError as exc:
        gone = (
            grpc.StatusCode.NOT_FOUND,
            grpc.StatusCode.OUT_OF_RANGE,
            grpc.StatusCode.FAILED_PRECONDITION,
        )
        rec.end(op, True if exc.code() in gone else None)
        return
    assert resp.info.version == version, (resp.info, version)
    op.version = (resp.info.incarnation, version)
    rec.end(op, True, tuple(m.user.text for m in resp.context.messages))


def context_client(
    rec: Recorder,
    process: int,
    cid: str,
    replicas: Sequence,
    changes: int,
    seed: int,
    delete_every: int = 0,
) -> None:
    """``changes`` acknowledged turns on ``cid`` (a delete instead of a turn
    every ``delete_every`` changes)."""
    rng = random.Random(seed)
    done = calls = 0
    while done < changes and calls < MAX_CALLS:
        calls += 2
        held = read_context(rec, process, cid, rng.choice(replicas).contexts)
        if held is False:
            continue
        stub = rng.choice(replicas).contexts
        if delete_every and done % delete_every == delete_every - 1:
            op = rec.begin(process, cid, "delete")
            try:
                resp = stub.DeleteContext(
                    pb.DeleteContextRequest(context_id=cid), timeout=CALL_TIMEOUT
                )
            except grpc.RpcError as exc:
                rec.end(op, _outcome(exc))
                continue
            rec.end(op, True, resp.deleted)
            done += 1
            continue
        text = f"p{process}.{calls}"
        version = len(held or ())
        op = rec.begin(process, cid, "append", (version, text))
        req = pb.AppendTurnRequest(
            context_id=cid,
            messages=[pb.Message(user=pb.UserMessage(text=text))],
            expected_version=version,
        )
        try:
            stub.AppendTurn(req, timeout=CALL_TIMEOUT)
        except grpc.RpcError as exc:
            rec.end(op, _outcome(exc))
            continue
        rec.end(op, True)
        done += 1


def reader(
    rec: Recorder, process: int, cid: str, replica, stop: threading.Event, most: int = 60
) -> None:
    """LATEST reads of ``cid`` on one replica until ``stop`` (``most`` at
    most); every third read, one of a version read before (on this replica,
    so often one another replica wrote)."""
    calls = 0
    rng = random.Random(process)
    seen: list[int] = []
    while not stop.is_set() and calls < most:
        calls += 1
        if calls % 3 == 0 and seen:
            read_version(rec, process, cid, replica.contexts, rng.choice(seen))
            continue
        read_context(rec, process, cid, replica.contexts, seen)


def run_all(targets: list[tuple]) -> None:
    """Run ``(fn, *args)`` each on its own thread; re-raise the first failure."""
    errors: list[BaseException] = []

    def guarded(fn, *args) -> None:
        try:
            fn(*args)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=t) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
