"""The ``memory/_index`` that serves listing on stores without LIST:
concurrent writers (one process and two sharing a bucket), crashes between
the value write and the index write (real process exits), lost and
corrupted index records, and the KeyIndex API itself."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import uuid

import boto3
import grpc
import pytest

from ctxd_plugins.memory_store import MemoryStore
from ctxd_sidecar.api.ctxd.v1 import memory_pb2 as pb
from ctxd_sidecar.core.errors import FailedPrecondition
from ctxd_sidecar.core.keyindex import KeyIndex
from ctxd_sidecar.core.storage import Storage
from ctxd_sidecar.plugin.manager import open_store
from ctxd_sidecar.plugin.store import Capability
from tests.conftest import s3_uri
from tests.support.memory_helpers import (
    call,
    fails,
    get,
    list_all,
    memory_core,
    put,
    stop,
    use_clock,
)

INDEX_OBJECT = "pfx/ctxd/default/memory/_index"


def s3_client(endpoint: str):
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")


def nolist_bucket(endpoint: str) -> tuple[str, str]:
    bucket = f"ctxd-{uuid.uuid4().hex[:12]}"
    s3_client(endpoint).create_bucket(Bucket=bucket)
    return bucket, s3_uri(endpoint, bucket, can_list=False)


def index_keys(endpoint: str, bucket: str) -> list[str]:
    """The names the index holds, read straight from the bucket (root, then its pages)."""
    s3 = s3_client(endpoint)

    def read(key: str) -> dict:
        return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())

    root = read(INDEX_OBJECT)
    if "keys" in root:  # the single-record format, before migration
        return sorted(root["keys"])
    names: list[str] = []
    for _, page_id in root["pages"]:
        names.extend(read(f"{INDEX_OBJECT}.p/{page_id}")["keys"])
    return sorted(names)


class NoListMemoryStore(MemoryStore):
    """The in-memory backend without LIST, as a plugin for such a store would be."""

    name = "memory-nolist"
    capabilities = MemoryStore.capabilities - {Capability.LIST}


# -- gRPC, S3 without list ------------------------------------------------------------
def test_the_store_without_list_keeps_an_index_and_the_store_with_list_does_not(
    start_sidecar, store_uri_for, moto_endpoint
):
    bucket, uri = nolist_bucket(moto_endpoint)
    r = start_sidecar(uri)
    put(r.memory, "a", "1")
    put(r.memory, "b/c", "2")
    assert index_keys(moto_endpoint, bucket) == ["a", "b/c"]
    r.memory.Delete(pb.DeleteRequest(key="a"))
    assert index_keys(moto_endpoint, bucket) == ["b/c"]

    listing = start_sidecar(store_uri_for("s3"))
    put(listing.memory, "a", "1")
    assert not memory_core(listing).index.active
    assert call(listing, memory_core(listing).storage.get("memory/_index")) is None


def test_concurrent_sets_of_distinct_keys_from_two_sidecars_sharing_a_bucket(
    start_sidecar, moto_endpoint
):
    bucket, uri = nolist_bucket(moto_endpoint)
    one, two = start_sidecar(uri), start_sidecar(uri)
    jobs = [(one if i % 2 else two, f"k/{i:03d}") for i in range(160)]
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda job: put(job[0].memory, job[1], "1"), jobs))
    expected = sorted(key for _, key in jobs)
    assert index_keys(moto_endpoint, bucket) == expected
    assert [r.key for r in list_all(one.memory)] == expected
    assert [r.key for r in list_all(two.memory)] == expected

    # Deletes racing with creates, from both sidecars.
    deletes = [(two if i % 2 else one, f"k/{i:03d}") for i in range(0, 160, 2)]
    creates = [(one, f"n/{i:03d}") for i in range(40)]

    def run(job):
        sidecar, key = job
        if key.startswith("k/"):
            assert sidecar.memory.Delete(pb.DeleteRequest(key=key)).deleted
        else:
            put(sidecar.memory, key, "1")

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(run, deletes + creates))
    expected = sorted([f"k/{i:03d}" for i in range(1, 160, 2)] + [k for _, k in creates])
    assert [r.key for r in list_all(two.memory)] == expected
    assert [r.key for r in list_all(one.memory)] == expected
    # A key one sidecar deleted soon after the other created it stays in the
    # index (the creator's write might still be in flight) until the grace
    # period has passed; listing skips it meanwhile and then drops it.
    assert set(expected) <= set(index_keys(moto_endpoint, bucket))
    use_clock(two).advance(memory_core(two).index.grace + 1)
    assert [r.key for r in list_all(two.memory)] == expected
    assert index_keys(moto_endpoint, bucket) == expected


@pytest.mark.parametrize(
    "crash_point, operation",
    [("memory.after_index_add", "set"), ("memory.before_index_remove", "delete")],
)
def test_a_crash_between_the_two_writes_leaves_index_and_values_consistent(
    spawn_sidecar, start_sidecar, moto_endpoint, crash_point, operation
):
    bucket, uri = nolist_bucket(moto_endpoint)
    setup = start_sidecar(uri)
    put(setup.memory, "before", '"kept"')
    if operation == "delete":
        put(setup.memory, "victim", '"to delete"')
    stop(setup)

    crashing = spawn_sidecar("--store", uri, env={"CTXD_CRASH_POINT": crash_point})
    stub = crashing.running().memory
    if operation == "set":
        fails(lambda: put(stub, "victim", '"never acknowledged"'))
    else:
        fails(lambda: stub.Delete(pb.DeleteRequest(key="victim"), timeout=30))
    assert crashing.proc.wait(10) == 70  # it exited at the crash point, between the writes
    crashing.kill()

    # The index names the key, but there is no value behind it.
    assert index_keys(moto_endpoint, bucket) == ["before", "victim"]
    s3 = s3_client(moto_endpoint)
    with pytest.raises(s3.exceptions.NoSuchKey):
        s3.get_object(Bucket=bucket, Key="pfx/ctxd/default/memory/victim")

    restarted = spawn_sidecar("--store", uri).running()
    assert fails(lambda: get(restarted.memory, "victim")).code() == grpc.StatusCode.NOT_FOUND
    assert [r.key for r in list_all(restarted.memory)] == ["before"]
    assert get(restarted.memory, "before").value_json == '"kept"'
    put(restarted.memory, "victim", '"second try"')
    assert [r.key for r in list_all(restarted.memory)] == ["before", "victim"]
    assert restarted.memory.Delete(pb.DeleteRequest(key="victim")).deleted
    assert [r.key for r in list_all(restarted.memory)] == ["before"]
    restarted.stop()

    # A dangling entry is dropped once no write could still be in flight.
    later = start_sidecar(uri)
    use_clock(later).advance(memory_core(later).index.grace + 1)
    put(later.memory, "fresh", "1")
    assert [x.key for x in list_all(later.memory)] == ["before", "fresh"]
    assert index_keys(moto_endpoint, bucket) == ["before", "fresh"]


def test_a_lost_index_is_rebuilt_from_a_listing_of_the_same_bucket(start_sidecar, moto_endpoint):
    bucket, uri = nolist_bucket(moto_endpoint)
    r = start_sidecar(uri)
    keys = [f"k{i}" for i in range(12)]
    for k in keys:
        put(r.memory, k, "1")
    s3 = s3_client(moto_endpoint)
    s3.delete_object(Bucket=bucket, Key=INDEX_OBJECT)
    assert list_all(r.memory) == []  # nothing can enumerate the values now
    assert get(r.memory, "k3").value_json == "1"  # but they are all still there

    # Repair: an operator opens the same bucket with listing allowed.
    async def rebuild():
        storage = Storage(open_store(s3_uri(moto_endpoint, bucket, can_list=True)))
        try:
            return await KeyIndex(storage, "memory").rebuild()
        finally:
            await storage.close()

    assert asyncio.run(rebuild()) == 12
    assert [x.key for x in list_all(r.memory)] == sorted(keys)
    put(r.memory, "new", "2")
    assert index_keys(moto_endpoint, bucket) == sorted([*keys, "new"])


def test_a_corrupted_index_lists_nothing_and_is_repaired_from_known_names(
    start_sidecar, moto_endpoint
):
    bucket, uri = nolist_bucket(moto_endpoint)
    r = start_sidecar(uri)
    for k in ("a", "b", "c"):
        put(r.memory, k, "1")
    s3_client(moto_endpoint).put_object(Bucket=bucket, Key=INDEX_OBJECT, Body=b"{not json")
    assert list_all(r.memory) == []
    assert get(r.memory, "b").value_json == "1"
    core = memory_core(r)
    assert call(r, core.index.rebuild(["a", "b", "c", "gone"])) == 3
    assert [x.key for x in list_all(r.memory)] == ["a", "b", "c"]


# -- KeyIndex directly ------------------------------------------------------------------
async def test_keyindex_lists_in_order_with_prefix_cursor_and_limit():
    storage = Storage(NoListMemoryStore())
    index = KeyIndex(storage, "things")
    assert index.active
    names = ["b/2", "a", "b/1", "é", "c"]
    for name in names:
        await index.add(name, {"n": name})
        await storage.put(f"things/{name}", b"v")
    assert await index.list() == ["a", "b/1", "b/2", "c", "é"]
    assert await index.list("b/") == ["b/1", "b/2"]
    assert await index.list(start_after="b/1", limit=2) == ["b/2", "c"]
    assert (await index.entries())["c"] == {"n": "c"}
    assert [(n, i.value) for n, i in await index.scan("b/")] == [("b/1", b"v"), ("b/2", b"v")]
    await storage.delete("things/a")
    await index.remove("a")
    assert await index.list() == ["b/1", "b/2", "c", "é"]
    await storage.close()


async def test_keyindex_group_commits_concurrent_adds():
    store = NoListMemoryStore()
    storage = Storage(store)
    index = KeyIndex(storage, "things")
    writes = []
    real_put = store.put

    def counting_put(key, value, **kw):
        if "/_index" in key:
            writes.append(key)
        return real_put(key, value, **kw)

    store.put = counting_put

    async def create(i):
        await index.add(f"n{i:03d}")
        await storage.put(f"things/n{i:03d}", b"1")

    await asyncio.gather(*(create(i) for i in range(200)))
    assert len(await index.list()) == 200
    assert len(writes) < 100  # adds that queue while a write is in flight share the next one
    await storage.close()


async def test_keyindex_cas_loop_keeps_every_add_from_two_processes():
    store = NoListMemoryStore()  # one shared backend, two independent sidecar views
    a, b = Storage(store), Storage(store)
    ia, ib = KeyIndex(a, "things"), KeyIndex(b, "things")

    async def create(index, storage, name):
        await index.add(name)
        await storage.put(f"things/{name}", b"1")

    await asyncio.gather(
        *(create(ia, a, f"a{i:03d}") for i in range(100)),
        *(create(ib, b, f"b{i:03d}") for i in range(100)),
    )
    assert len(await ia.list()) == 200 and len(await ib.list()) == 200
    await a.close()
    b._pool.shutdown()


async def test_keyindex_keeps_a_fresh_entry_another_process_may_still_be_writing():
    store = NoListMemoryStore()
    a, b = Storage(store), Storage(store)
    ia, ib = KeyIndex(a, "things"), KeyIndex(b, "things")
    now = [1000.0]
    ia.clock = ib.clock = lambda: now[0]
    await ia.add("k")  # process A is about to write the value...
    await b.delete("things/k")
    await ib.remove("k")  # ...while B removes k after deleting an older value
    assert "k" in await ia.entries()
    await a.put("things/k", b"A's value")
    assert await ib.list() == ["k"]  # A's value is listed
    await a.delete("things/k")
    await ia.remove("k")
    assert await ib.list() == []
    # An entry nobody wrote a value for is listed by nobody and dropped after the grace.
    await ia.add("ghost")
    assert await ib.list() == [] and "ghost" in await ib.entries()
    now[0] += ia.grace + 1
    assert await ib.list() == [] and "ghost" not in await ib.entries()
    await a.close()
    b._pool.shutdown()


async def test_keyindex_on_a_store_with_list_uses_the_store():
    storage = Storage(MemoryStore())
    index = KeyIndex(storage, "things")
    assert not index.active
    await index.add("x")  # no-op
    assert await storage.get("things/_index") is None
    await storage.put("things/x", b"1")
    await storage.put("things/y", b"1")
    await storage.put("things/_reserved", b"1")
    assert await index.list() == ["x", "y"]
    assert await index.list(start_after="x") == ["y"]
    await storage.close()


async def test_keyindex_rebuild_needs_names_when_the_store_cannot_list():
    storage = Storage(NoListMemoryStore())
    index = KeyIndex(storage, "things")
    with pytest.raises(FailedPrecondition):
        await index.rebuild()
    await storage.put("things/a", b"1")
    assert await index.rebuild(["a", "b"]) == 1
    assert await index.list() == ["a"]
    await storage.close()
