"""Replicas checked as Jepsen checks a database: concurrent clients on real
``ctxd serve`` processes sharing one store, some of them through a link that
loses the store's replies after the store acted on the request, every call
recorded, and each memory key's and each context's history checked against
a sequential model (tests/support/history.py): no write applied twice, no
acknowledged write missing, no LATEST read that misses a write acknowledged
before it began, and every read of an earlier version (at_version, on any
replica) sees what that version held when it was made. Every write carries a
vector of its counter; at the end, Search on every replica finds each key by
the vector of the write Get reads there.

PostgreSQL through tests/support/pgproxy.py (a reply lost after the commit,
held a moment first so other replicas write on top before the retry); S3 on
moto through tests/support/faultproxy.py (PUTs cut after moto applied them).
"""

from __future__ import annotations

import random
import threading
import uuid
from dataclasses import dataclass

import boto3
import pytest

from tests.conftest import s3_uri
from tests.support.faultproxy import FaultProxy
from tests.support.history import LOG, REGISTER, Recorder, check
from tests.support.history_workload import (
    context_client,
    counter,
    create_memory,
    memory_client,
    read_context,
    reader,
    run_all,
    vectors_agree,
)
from tests.support.pgproxy import PgProxy


@dataclass
class Size:
    replicas: int
    keys: int
    contexts: int
    #: Acknowledged changes each client makes (three clients per key or context).
    increments: int
    turns: int


#: LATEST readers per context on each replica.
READERS = 2
SHORT = Size(replicas=2, keys=3, contexts=3, increments=10, turns=5)
LONG = Size(replicas=3, keys=8, contexts=8, increments=12, turns=8)


@pytest.fixture
def pg_replicas(spawn_sidecar, pg_server):
    """Factory: replicas on one PostgreSQL schema, each through its own
    lossy link (the first one slow too); their proxies."""
    if not pg_server.pg_ctl:
        pytest.skip("needs the suite's own server (a loopback port to proxy)")
    proxies: list[PgProxy] = []

    def make(n: int, seed: int):
        uri = pg_server.fresh_store_uri(statement_timeout=5)
        mine = [PgProxy(pg_server.host, pg_server.port, seed=seed + i) for i in range(n)]
        proxies.extend(mine)
        replicas = [spawn_sidecar("--store", p.uri(uri, pg_server.port)).running() for p in mine]
        # Armed once serving: start-up itself is not under test here.
        for p in mine:
            p.drop_rate, p.hold = 0.08, 0.2
        mine[0].delay = 0.002
        return replicas, mine

    yield make
    for p in proxies:
        p.stop()


@pytest.fixture
def s3_replicas(spawn_sidecar, moto_endpoint):
    """Factory: replicas on one moto bucket; the first through a proxy that
    cuts PUTs after moto applied them (a background thread arms the cuts)."""
    proxies: list[FaultProxy] = []
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def make(n: int, seed: int):
        bucket = f"ctxd-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1").create_bucket(
            Bucket=bucket
        )
        proxy = FaultProxy(moto_endpoint).start()
        proxies.append(proxy)
        opts = "&connect_timeout=2&read_timeout=5&max_attempts=4"
        lossy = spawn_sidecar("--store", s3_uri(proxy.url, bucket) + opts).running()
        others = [
            spawn_sidecar("--store", s3_uri(moto_endpoint, bucket)).running() for _ in range(n - 1)
        ]
        rng = random.Random(seed)

        def cut() -> None:
            while not stop.wait(rng.uniform(0.02, 0.2)):
                proxy.add("reset_after_forward", method="PUT", times=1)

        threads.append(threading.Thread(target=cut, daemon=True))
        threads[-1].start()
        return [lossy, *others], [proxy]

    yield make
    stop.set()
    for t in threads:
        t.join()
    for p in proxies:
        p.stop()


def run_history(replicas, size: Size, seed: int):
    """The workload on ``replicas``; the memory and context reports."""
    rec = Recorder()
    run = uuid.uuid4().hex[:6]
    keys = [f"h{run}/k{i}" for i in range(size.keys)]
    cids = [f"h{run}-c{i}" for i in range(size.contexts)]
    for key in keys:
        create_memory(rec, key, replicas[0])
    targets, process = [], 0
    for key in keys:
        for _ in range(3):
            process += 1
            targets.append(
                (memory_client, rec, process, key, replicas, size.increments, seed + process)
            )
    for cid in cids:
        for j in range(3):
            process += 1
            every = 3 if j == 0 else 0
            args = (rec, process, cid, replicas, size.turns, seed + process, every)
            targets.append((context_client, *args))
    stop = threading.Event()
    readers = []
    for cid in cids:
        # Readers on every replica, so reads queue behind each other there.
        for r in replicas * READERS:
            process += 1
            readers.append(threading.Thread(target=reader, args=(rec, process, cid, r, stop)))
    for t in readers:
        t.start()
    try:
        run_all(targets)
    finally:
        stop.set()
        for t in readers:
            t.join()
    for cid in cids:  # a last read everywhere: every acknowledged turn is there
        for r in replicas:
            process += 1
            read_context(rec, process, cid, r.contexts)
    histories = rec.by_key()
    memory = check({k: histories[k] for k in keys}, REGISTER)
    contexts = check({c: histories[c] for c in cids}, LOG)
    acked = sum(1 for op in rec.ops if op.f == "cas" and op.ok)
    maybe = sum(1 for op in rec.ops if op.f == "cas" and op.ok is None)
    total = sum(counter(replicas[-1], k) for k in keys)
    print(f"memory: {memory}\ncontexts: {contexts}")
    print(f"increments: {acked} acknowledged, {maybe} unknown, counters sum to {total}")
    earlier = sum(1 for op in rec.ops if op.f == "get_at" and op.ok and op.out is not None)
    print(f"earlier versions read: {earlier}")
    assert earlier, "no earlier version was read: the run proved nothing about history"
    assert acked <= total <= acked + maybe, (acked, maybe, total)
    # Each key's vectors are those of the write every replica reads.
    stale = [(k, i) for k in keys for i, r in enumerate(replicas) if not vectors_agree(r, k)]
    assert not stale, f"Search disagrees with Get on (key, replica): {stale}"
    return memory, contexts


def _check(replicas, proxies, size: Size, seed: int) -> None:
    memory, contexts = run_history(replicas, size, seed)
    lost = sum(p.cuts if isinstance(p, PgProxy) else len(p.injected) for p in proxies)
    print(f"replies lost: {lost}")
    assert lost >= 1, "no reply was lost: the run proved nothing about retries"
    assert memory.ok, f"memory histories:\n{memory}"
    assert contexts.ok, f"context histories:\n{contexts}"


def test_postgres_replicas_histories_are_linearizable(pg_replicas):
    replicas, proxies = pg_replicas(SHORT.replicas, seed=1)
    _check(replicas, proxies, SHORT, seed=1)


def test_s3_replicas_histories_are_linearizable(s3_replicas):
    replicas, proxies = s3_replicas(SHORT.replicas, seed=2)
    _check(replicas, proxies, SHORT, seed=2)


@pytest.mark.slow
def test_postgres_replicas_histories_at_length(pg_replicas):
    replicas, proxies = pg_replicas(LONG.replicas, seed=11)
    _check(replicas, proxies, LONG, seed=11)


@pytest.mark.slow
def test_s3_replicas_histories_at_length(s3_replicas):
    replicas, proxies = s3_replicas(LONG.replicas, seed=21)
    _check(replicas, proxies, LONG, seed=21)
