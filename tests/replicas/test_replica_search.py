"""Memory search across replicas (``ctxd serve`` processes sharing one store):
a record put on one replica is found by Search on another, whose index
follows the store (PostgreSQL's change feed; a rescan on S3), and a delete
or rewrite on one is never returned stale by the other."""

from __future__ import annotations

import time

import pytest

from ctxd_sidecar.api.ctxd.v1 import memory_pb2 as mpb


def search_keys(r, query, prefix: str) -> list[str]:
    req = mpb.SearchRequest(prefix=prefix, query_vector=query, limit=10)
    return [h.record.key for h in r.memory.Search(req, timeout=30).hits]


def put(r, key: str, *values: float) -> None:
    vectors = [mpb.Vector(field="text", values=list(values))] if values else []
    r.memory.Set(mpb.SetRequest(key=key, value_json='{"t":1}', vectors=vectors), timeout=30)


def eventually(check, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


@pytest.mark.parametrize("backend", ["postgres", "s3"])
def test_put_on_one_replica_is_found_by_search_on_another(spawn_sidecar, store_uri_for, backend):
    uri = store_uri_for(backend)
    refresh = ("--set", "memory.search_refresh=0.2")
    a, b = (spawn_sidecar("--store", uri, *refresh).running() for _ in range(2))
    put(a, "s/first", 1, 0, 0)  # fixes the dimension; b has not seen it
    time.sleep(1.0)  # b hears of the record before anything asks it the dimension
    assert eventually(lambda: search_keys(b, [1, 0, 0], "s/") == ["s/first"])
    put(a, "s/second", 0, 1, 0)
    assert eventually(lambda: search_keys(b, [0, 1, 0], "s/")[:1] == ["s/second"])
    # Gone or rewritten on a: never returned by b, even before b's index hears of it.
    a.memory.Delete(mpb.DeleteRequest(key="s/first"), timeout=30)
    put(a, "s/second")  # rewritten without vectors
    assert search_keys(b, [1, 0, 0], "s/") == []
