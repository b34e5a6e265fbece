"""S3 under faults: a real proxy between boto3 and moto injects errors, resets
and delays. Retried calls take effect exactly once; a store that stays down
gives UNAVAILABLE quickly and NOT_SERVING health, then recovers in place."""

from __future__ import annotations

import time
import uuid

import boto3
import grpc
import pytest
from grpc_health.v1 import health_pb2

from ctxd_plugins.s3.store import S3Store
from ctxd_sidecar.api.ctxd.v1 import memory_pb2
from ctxd_sidecar.plugin.store import PreconditionFailed, StoreUnavailable
from tests.conftest import s3_uri
from tests.support.faultproxy import FaultProxy


@pytest.fixture
def proxy(moto_endpoint):
    p = FaultProxy(moto_endpoint).start()
    yield p
    p.stop()


@pytest.fixture
def bucket(moto_endpoint):
    name = f"ctxd-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1").create_bucket(
        Bucket=name
    )
    return name


@pytest.fixture
def store(proxy, bucket):
    s = S3Store(
        bucket,
        "faults",
        endpoint_url=proxy.url,
        region="us-east-1",
        connect_timeout=1,
        read_timeout=1,
        max_attempts=3,
    )
    yield s
    s.close()


@pytest.mark.parametrize(
    "action, kwargs",
    [
        ("status", {"status": 500, "code": "InternalError"}),
        ("status", {"status": 503, "code": "SlowDown"}),
        ("reset", {}),
    ],
    ids=["500", "503-slowdown", "reset"],
)
def test_a_put_retried_after_a_transient_fault_is_applied_exactly_once(
    store, proxy, action, kwargs
):
    proxy.add(action, method="PUT", **kwargs)
    version = store.put("k", b"value-1", if_absent=True)
    assert store.get("k").value == b"value-1"
    assert store.get("k").version == version
    assert proxy.injected and proxy.injected[0][0] == action
    assert proxy.count("PUT", "/faults/k") == 1


def test_a_conditional_put_whose_reply_was_lost_is_recognised_as_our_own(store, proxy):
    proxy.add("reset_after_forward", method="PUT")
    version = store.put("k", b"first write", if_absent=True)
    assert store.get("k").version == version
    assert proxy.count("PUT", "/faults/k") == 1  # applied once, recognised by its write id

    proxy.add("reset_after_forward", method="PUT")
    v2 = store.put("k", b"second write", if_version=version)
    assert store.get("k").value == b"second write" and store.get("k").version == v2


def test_a_real_conflict_stays_a_conflict_even_after_retries(store, proxy):
    store.put("k", b"someone else's", if_absent=True)
    proxy.add("status", method="PUT", status=500, code="InternalError")
    with pytest.raises(PreconditionFailed):
        store.put("k", b"mine", if_absent=True)
    assert store.get("k").value == b"someone else's"


def test_a_409_conditional_conflict_is_a_precondition_failure(store, proxy):
    store.put("k", b"v", if_absent=True)
    current = store.get("k").version
    proxy.add("status", method="PUT", status=409, code="ConditionalRequestConflict")
    with pytest.raises(PreconditionFailed):
        store.put("k", b"v2", if_version=current)
    assert store.get("k").value == b"v"


def test_slow_responses_time_out_and_a_down_store_is_unavailable_then_recovers(store, proxy):
    proxy.add("delay", method="GET", delay=3.0, times=10)
    started = time.monotonic()
    with pytest.raises(StoreUnavailable):
        store.get("slow")
    assert time.monotonic() - started < 15  # bounded by read_timeout x attempts
    proxy.faults.clear()

    proxy.down()
    with pytest.raises(StoreUnavailable):
        store.put("k", b"v")
    proxy.up()
    store.put("k", b"v")
    assert store.get("k").value == b"v"


def test_sidecar_reports_not_serving_while_the_store_is_down_and_recovers(
    start_sidecar, proxy, bucket
):
    uri = s3_uri(proxy.url, bucket) + "&connect_timeout=1&read_timeout=1"
    sc = start_sidecar(uri, store_probe_interval=0.2)
    memory = sc.memory
    memory.Set(memory_pb2.SetRequest(key="k", value_json="1"), timeout=10)

    def wait_status(want):
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            resp = sc.health.Check(health_pb2.HealthCheckRequest(service="ctxd.v1.MemoryService"))
            if resp.status == want:
                return
            time.sleep(0.1)
        raise AssertionError(f"health never became {want}")

    proxy.down()
    wait_status(health_pb2.HealthCheckResponse.NOT_SERVING)
    overall = sc.health.Check(health_pb2.HealthCheckRequest(service=""))
    assert overall.status == health_pb2.HealthCheckResponse.SERVING  # liveness stays up
    with pytest.raises(grpc.RpcError) as err:
        memory.Get(memory_pb2.GetRequest(key="k"), timeout=20)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "127.0.0.1" not in err.value.details()

    proxy.up()
    wait_status(health_pb2.HealthCheckResponse.SERVING)
    assert memory.Get(memory_pb2.GetRequest(key="k"), timeout=10).record.value_json == "1"
