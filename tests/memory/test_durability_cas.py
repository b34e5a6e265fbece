"""Memory compare-and-set on S3 loses no acknowledged increment: 32 writers
over real gRPC, two sidecars on one moto bucket, connections dropped before
and after S3 applied a write. Each trial ends with the counter equal to the
increments the writers were told succeeded."""

from __future__ import annotations

import concurrent.futures
import random
import threading
import time
import uuid

import boto3
import grpc
import pytest

from ctxd_sidecar.api.ctxd.v1 import memory_pb2
from tests.conftest import s3_uri
from tests.support.faultproxy import FaultProxy

WRITERS = 32
INCREMENTS = 1
#: Retryable answers: the increment was not acknowledged, read and try again.
RETRY = {grpc.StatusCode.ABORTED, grpc.StatusCode.UNAVAILABLE}


@pytest.fixture
def proxy(moto_endpoint):
    p = FaultProxy(moto_endpoint).start()
    yield p
    p.stop()


@pytest.fixture
def replicas(start_sidecar, proxy, moto_endpoint):
    bucket = f"ctxd-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1").create_bucket(
        Bucket=bucket
    )
    uri = s3_uri(proxy.url, bucket) + "&connect_timeout=2&read_timeout=5&max_attempts=4"
    return [start_sidecar(uri).memory for _ in range(2)]


def _increment(memory, key: str) -> None:
    rng = random.Random()
    while True:
        try:
            got = memory.Get(memory_pb2.GetRequest(key=key), timeout=30).record
            memory.Set(
                memory_pb2.SetRequest(
                    key=key, value_json=str(int(got.value_json) + 1), expected_version=got.version
                ),
                timeout=30,
            )
            return
        except grpc.RpcError as exc:
            if exc.code() not in RETRY:
                raise
            time.sleep(rng.uniform(0, 0.05))  # as a client would back off


def _dropping(proxy: FaultProxy, stop: threading.Event, rng: random.Random) -> None:
    """Arm a dropped connection now and then: after S3 applied the PUT, or before."""
    while not stop.wait(rng.uniform(0.05, 0.3)):
        action = "reset_after_forward" if rng.random() < 0.7 else "reset"
        proxy.add(action, method="PUT", times=1)


def _trial(replicas, proxy: FaultProxy, n: int, seed: int) -> tuple[int, int]:
    key = f"counter-{n}"
    replicas[0].Set(memory_pb2.SetRequest(key=key, value_json="0", create_only=True), timeout=30)
    proxy.faults.clear()
    stop = threading.Event()
    dropper = threading.Thread(target=_dropping, args=(proxy, stop, random.Random(seed)))
    dropper.start()
    acked = 0
    try:
        with concurrent.futures.ThreadPoolExecutor(WRITERS) as pool:
            futures = [
                pool.submit(_increment, replicas[i % len(replicas)], key)
                for i in range(WRITERS)
                for _ in range(INCREMENTS)
            ]
            for future in futures:
                future.result()
                acked += 1
    finally:
        stop.set()
        dropper.join()
        proxy.faults.clear()
    counter = int(replicas[1].Get(memory_pb2.GetRequest(key=key), timeout=30).record.value_json)
    return counter, acked


def _run(replicas, proxy, trials: int, budget_s: float) -> None:
    deadline = time.monotonic() + budget_s
    done = dropped = 0
    for n in range(trials):
        if time.monotonic() > deadline:
            break
        before = len(proxy.injected)
        counter, acked = _trial(replicas, proxy, n, seed=n)
        assert counter == acked, f"trial {n}: counter {counter}, acknowledged {acked}"
        done += 1
        dropped += len(proxy.injected) - before
    print(
        f"CAS under drops: {done} trials, {done * WRITERS * INCREMENTS} increments, "
        f"{dropped} connections dropped, 0 lost"
    )
    assert done >= 1 and dropped >= 1


def test_cas_counter_on_s3_under_dropped_connections(replicas, proxy):
    _run(replicas, proxy, trials=6, budget_s=20)


@pytest.mark.slow
@pytest.mark.timeout(600)  # the trials stop at 300 s: the slow set shares CI's time
def test_cas_counter_on_s3_under_dropped_connections_hundreds_of_trials(replicas, proxy):
    _run(replicas, proxy, trials=300, budget_s=300)
