"""A full disk turns the ctxd services NOT_SERVING (readiness) until a write
succeeds again; the process itself stays SERVING (liveness). The disk is a
small tmpfs mounted for the test (needs root), holding a real LMDB store."""

from __future__ import annotations

import time
import uuid

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ctxd_sidecar.api.ctxd.v1 import memory_pb2 as mpb
from tests.support.tmpfs import mounted

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture
def small_disk(tmp_path):
    """A 6 MiB tmpfs; skipped where mounting is not allowed."""
    with mounted(tmp_path / "disk", "6m") as where:
        yield where


def status(channel, service: str) -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10).status


def wait_status(channel, service: str, want: int, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while (got := status(channel, service)) != want:
        assert time.monotonic() < deadline, f"{service}: still {got}, never {want}"
        time.sleep(0.05)


def test_a_full_disk_is_not_serving_until_a_write_succeeds(spawn_sidecar, small_disk):
    ballast = small_disk / "ballast"
    ballast.write_bytes(b"\0" * (2 * 1024 * 1024))
    sc = spawn_sidecar(
        "--store",
        f"lmdb://{small_disk / 'data'}?map_size=64MiB",
        "--set",
        "store_probe_interval=0.2",
    )
    try:
        r = sc.running()
        value = '"' + "x" * (60 * 1024) + '"'
        for i in range(200):  # 12 MiB at most: twice what the disk holds
            try:
                r.memory.Set(mpb.SetRequest(key=f"k{i}-{uuid.uuid4().hex[:6]}", value_json=value))
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, exc.details()
                assert "full" in exc.details()
                break
        else:
            raise AssertionError("the disk never filled")
        wait_status(sc.channel, "ctxd.v1.MemoryService", NOT_SERVING)
        assert status(sc.channel, "ctxd.v1.ContextService") == NOT_SERVING
        assert status(sc.channel, "") == SERVING  # liveness: not a reason to restart

        ballast.unlink()  # room again: the probe's write succeeds
        wait_status(sc.channel, "ctxd.v1.MemoryService", SERVING)
        r.memory.Set(mpb.SetRequest(key="after", value_json="1"), timeout=10)
    finally:
        sc.kill()
