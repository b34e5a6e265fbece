"""The memory caps hold for the store as a whole: replicas sharing one S3
bucket or PostgreSQL database never hold more than ``memory.max_keys`` /
``memory.max_total_bytes`` together, racing for the last free key included,
and a replica started later sees the true count."""

from __future__ import annotations

import concurrent.futures

import grpc
import pytest

from ctxd_sidecar.api.ctxd.v1 import memory_pb2 as mpb

MAX_KEYS = 12


def keys_in_store(r) -> list[str]:
    page = r.memory.List(mpb.ListRequest(limit=1000), timeout=30)
    return [rec.key for rec in page.records]


def try_set(r, key: str, value: str = "1") -> grpc.StatusCode:
    try:
        r.memory.Set(mpb.SetRequest(key=key, value_json=value), timeout=30)
        return grpc.StatusCode.OK
    except grpc.RpcError as exc:
        return exc.code()


@pytest.mark.parametrize("backend", ["s3", "s3-nolist", "postgres"])
def test_two_replicas_share_max_keys_and_a_later_one_sees_the_count(
    spawn_sidecar, store_uri_for, backend
):
    uri = store_uri_for(backend)
    cap = ("--set", f"memory.max_keys={MAX_KEYS}")
    a, b = (spawn_sidecar("--store", uri, *cap).running() for _ in range(2))

    # Both replicas race for every key up to and past the cap.
    attempts = [(r, f"{name}{i}") for i in range(MAX_KEYS) for name, r in (("a", a), ("b", b))]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(lambda job: try_set(*job), attempts))
    accepted = codes.count(grpc.StatusCode.OK)
    refused = codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert (accepted, refused) == (MAX_KEYS, MAX_KEYS), codes
    assert len(keys_in_store(a)) == MAX_KEYS

    # A replica started now counts what the others wrote: the store is full.
    c = spawn_sidecar("--store", uri, *cap).running()
    assert try_set(c, "late") == grpc.StatusCode.RESOURCE_EXHAUSTED
    # Room made on one replica is room on every other.
    for key in keys_in_store(a)[:2]:
        a.memory.Delete(mpb.DeleteRequest(key=key), timeout=30)
    assert [try_set(c, f"late{i}") for i in range(3)] == [
        grpc.StatusCode.OK,
        grpc.StatusCode.OK,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    ]
    assert try_set(b, "b-after") == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert len(keys_in_store(b)) == MAX_KEYS


@pytest.mark.parametrize("backend", ["s3", "postgres"])
def test_max_total_bytes_holds_across_replicas(spawn_sidecar, store_uri_for, backend):
    uri = store_uri_for(backend)
    cap = ("--set", "memory.max_total_bytes=1000")
    a, b = (spawn_sidecar("--store", uri, *cap).running() for _ in range(2))
    value = '"' + "x" * 398 + '"'  # 400 bytes of JSON text
    assert try_set(a, "a", value) == grpc.StatusCode.OK
    assert try_set(b, "b", value) == grpc.StatusCode.OK
    assert try_set(a, "c", value) == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert try_set(b, "c", value) == grpc.StatusCode.RESOURCE_EXHAUSTED
    # Shrinking a value on one replica frees its bytes on the other.
    assert try_set(a, "b", "1") == grpc.StatusCode.OK
    assert try_set(b, "c", value) == grpc.StatusCode.OK
