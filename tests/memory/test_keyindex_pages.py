"""The paged key index on stores without LIST: splits past the page bound,
ordered listing across pages, concurrent writers (in one process and in two
sidecar processes on one moto bucket), crashes in the middle of a split,
migration of the single-record index, and bounded bytes per create."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import random
import time
import uuid

import boto3
import pytest

from ctxd_sidecar.core.keyindex import KeyIndex
from ctxd_sidecar.core.storage import Storage
from ctxd_sidecar.plugin.manager import open_store
from tests.conftest import s3_uri
from tests.memory.test_memory_index import NoListMemoryStore
from tests.support.memory_helpers import fails, list_all, memory_core, put, stop

ROOT = "pfx/ctxd/default/memory/_index"


def s3_client(endpoint: str):
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")


def nolist_bucket(endpoint: str) -> tuple[str, str]:
    bucket = f"ctxd-{uuid.uuid4().hex[:12]}"
    s3_client(endpoint).create_bucket(Bucket=bucket)
    return bucket, s3_uri(endpoint, bucket, can_list=False)


def read_json(endpoint: str, bucket: str, key: str) -> dict:
    return json.loads(s3_client(endpoint).get_object(Bucket=bucket, Key=key)["Body"].read())


def bucket_pages(endpoint: str, bucket: str, root_key: str = ROOT) -> list[dict]:
    """The pages the root names, in order, as stored."""
    root = read_json(endpoint, bucket, root_key)
    return [read_json(endpoint, bucket, f"{root_key}.p/{pid}") for _, pid in root["pages"]]


async def store_pages(storage: Storage, namespace: str) -> list[dict]:
    root = json.loads((await storage.get(f"{namespace}/_index")).value)
    out = []
    for _, pid in root["pages"]:
        out.append(json.loads((await storage.get(f"{namespace}/_index.p/{pid}")).value))
    return out


async def create(index: KeyIndex, storage: Storage, name: str) -> None:
    await index.add(name)
    await storage.put(f"{index.namespace}/{name}", b"v")


# -- one process, in-memory store without LIST -------------------------------------------
async def test_pages_split_past_page_max_and_listing_stays_complete_and_ordered():
    storage = Storage(NoListMemoryStore())
    index = KeyIndex(storage, "things", page_max=4)
    names = [f"{p}/{i:02d}" for p in ("a", "b", "c") for i in range(20)] + ["é", "z"]
    for name in random.Random(7).sample(names, len(names)):
        await create(index, storage, name)
    pages = await store_pages(storage, "things")
    assert len(pages) >= len(names) // 4
    assert all(len(p["keys"]) <= 4 for p in pages) and all("split" not in p for p in pages)
    # Each page holds exactly its range; the ranges cover every name once.
    lows = [p["lo"] for p in pages]
    assert lows[0] == "" and lows == sorted(lows)
    assert sorted(n for p in pages for n in p["keys"]) == sorted(names)

    assert await index.list() == sorted(names)
    for limit in (1, 3, 5, 7):  # pages of every size across page boundaries
        got, after = [], ""
        while batch := await index.list(start_after=after, limit=limit):
            assert len(batch) <= limit
            got += batch
            after = batch[-1]
        assert got == sorted(names)
    assert await index.list("b/") == [f"b/{i:02d}" for i in range(20)]
    assert await index.list("b/", start_after="b/05", limit=6) == [
        f"b/{i:02d}" for i in range(6, 12)
    ]
    assert await index.list("b/1", limit=3) == ["b/10", "b/11", "b/12"]
    assert await index.list(start_after="c/19") == ["z", "é"]

    for name in names[::2]:
        await storage.delete(f"things/{name}")
        await index.remove(name)
    assert await index.list() == sorted(names[1::2])
    assert set(await index.entries()) == set(names[1::2])
    await storage.close()


async def test_a_listing_with_a_limit_reads_only_the_pages_it_needs():
    store = NoListMemoryStore()
    storage = Storage(store)
    index = KeyIndex(storage, "things", page_max=8)
    await asyncio.gather(*(create(index, storage, f"n{i:04d}") for i in range(400)))
    reads = []
    real_get = store.get

    def counting_get(key):
        if "/_index.p/" in key:
            reads.append(key)
        return real_get(key)

    store.get = counting_get
    assert await index.list(start_after="n0200", limit=3) == ["n0201", "n0202", "n0203"]
    assert len(reads) <= 2
    await storage.close()


async def test_group_commit_of_many_adds_to_one_page_splits_into_bounded_pages():
    storage = Storage(NoListMemoryStore())
    index = KeyIndex(storage, "things", page_max=8)
    await asyncio.gather(*(create(index, storage, f"n{i:04d}") for i in range(300)))
    pages = await store_pages(storage, "things")
    assert all(len(p["keys"]) <= 8 for p in pages)
    assert await index.list() == [f"n{i:04d}" for i in range(300)]
    await storage.close()


async def test_a_listing_spans_any_number_of_pages():
    storage = Storage(NoListMemoryStore())
    index = KeyIndex(storage, "things", page_max=2)
    names = [f"n{i:04d}" for i in range(600)]
    await asyncio.gather(*(create(index, storage, n) for n in names))
    assert len(await store_pages(storage, "things")) > 250
    assert await index.list() == names
    await storage.close()


async def test_two_views_of_one_store_lose_no_addition_across_splits():
    store = NoListMemoryStore()  # one shared backend, two independent sidecar views
    a, b = Storage(store), Storage(store)
    ia, ib = KeyIndex(a, "things", page_max=4), KeyIndex(b, "things", page_max=4)
    names = [f"k{i:03d}" for i in range(300)]
    random.Random(3).shuffle(names)
    await asyncio.gather(
        *(create(ia, a, n) for n in names[::2]), *(create(ib, b, n) for n in names[1::2])
    )
    assert await ia.list() == sorted(names) and await ib.list() == sorted(names)
    pages = await store_pages(a, "things")
    assert all(len(p["keys"]) <= 4 for p in pages)
    await a.close()
    b._pool.shutdown()


async def test_a_single_record_index_is_read_then_migrated_to_pages_on_first_write():
    storage = Storage(NoListMemoryStore())
    old = {f"k{i:03d}": {"m": i} for i in range(50)}
    for name in old:
        await storage.put(f"things/{name}", b"v")
    await storage.put("things/_index", json.dumps({"v": 1, "keys": old}).encode())
    index = KeyIndex(storage, "things", page_max=16)
    assert await index.list(start_after="k010", limit=2) == ["k011", "k012"]
    assert (await index.entries())["k007"] == 7
    await create(index, storage, "new")
    root = json.loads((await storage.get("things/_index")).value)
    assert root["v"] == 2 and len(root["pages"]) >= 50 // 16
    assert all(len(p["keys"]) <= 16 for p in await store_pages(storage, "things"))
    assert await index.list() == sorted([*old, "new"])
    assert (await index.entries())["k049"] == 49
    await storage.close()


async def test_a_migration_that_loses_the_race_to_an_old_writer_keeps_its_addition():
    storage = Storage(NoListMemoryStore())
    await storage.put("things/_index", json.dumps({"v": 1, "keys": {"a": {}}}).encode())
    await storage.put("things/a", b"v")
    index = KeyIndex(storage, "things", page_max=4)
    real_put = storage.put
    raced = []

    async def racing_put(key, value, **kw):
        if key == "things/_index" and not raced:  # an older sidecar adds "b" first
            raced.append(key)
            await real_put(key, json.dumps({"v": 1, "keys": {"a": {}, "b": {}}}).encode())
        return await real_put(key, value, **kw)

    storage.put = racing_put
    await storage.put("things/b", b"v")
    await create(index, storage, "c")
    assert raced and await index.list() == ["a", "b", "c"]
    await storage.close()


async def test_a_lost_page_is_recreated_empty_and_rebuild_restores_its_names():
    storage = Storage(NoListMemoryStore())
    index = KeyIndex(storage, "things", page_max=4)
    names = [f"n{i:02d}" for i in range(20)]
    for name in names:
        await create(index, storage, name)
    root = json.loads((await storage.get("things/_index")).value)
    lower, lost = root["pages"][1]
    gone = json.loads((await storage.get(f"things/_index.p/{lost}")).value)["keys"]
    await storage.delete(f"things/_index.p/{lost}")
    assert await index.list() == [n for n in names if n not in gone]
    await create(index, storage, lower + "x")  # a write to the lost range still works
    assert lower + "x" in await index.list()
    assert await index.rebuild(names) == len(names) + 1
    assert await index.list() == sorted([*names, lower + "x"])
    await storage.close()


# -- S3 without LIST (moto over HTTP) ---------------------------------------------------
def test_bytes_written_per_create_do_not_grow_with_the_number_of_names(moto_endpoint):
    async def per_create(page_max: int) -> tuple[float, float]:
        bucket, uri = nolist_bucket(moto_endpoint)
        storage = Storage(open_store(uri))
        index = KeyIndex(storage, "contexts", page_max=page_max)
        written = []
        real_put = storage.put

        async def counting_put(key, value, **kw):
            if key.startswith("contexts/_index"):
                written.append(len(value))
            return await real_put(key, value, **kw)

        storage.put = counting_put

        async def measure(existing: int) -> float:
            have = len(await index.entries())
            await asyncio.gather(*(index.add(f"fill-{i:05d}") for i in range(have, existing)))
            written.clear()
            for _ in range(40):
                await index.add(uuid.uuid4().hex)
            return sum(written) / 40

        try:
            return await measure(100), await measure(2000)
        finally:
            await storage.close()

    small, large = asyncio.run(per_create(32))
    assert small < 32 * 120  # about one page of entries, never the whole index
    assert large <= small * 1.3, (small, large)


def test_two_sidecar_processes_on_one_bucket_lose_nothing_across_splits(
    spawn_sidecar, moto_endpoint
):
    bucket, uri = nolist_bucket(moto_endpoint)
    env = {"CTXD_INDEX_PAGE_MAX": "8"}
    one = spawn_sidecar("--store", uri, env=env).running()
    two = spawn_sidecar("--store", uri, env=env).running()
    keys = [f"k/{i:03d}" for i in range(240)]
    random.Random(5).shuffle(keys)
    jobs = [(one if i % 2 else two, key) for i, key in enumerate(keys)]
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda job: put(job[0].memory, job[1], "1"), jobs))
    pages = bucket_pages(moto_endpoint, bucket)
    assert len(pages) >= 240 // 8
    assert all(len(p["keys"]) <= 8 and "split" not in p for p in pages)
    assert sorted(n for p in pages for n in p["keys"]) == sorted(keys)
    assert [r.key for r in list_all(one.memory, limit=7)] == sorted(keys)
    assert [r.key for r in list_all(two.memory, limit=13)] == sorted(keys)


@pytest.mark.parametrize("point", ["memory.after_page_seal", "memory.after_page_split"])
def test_a_crash_in_the_middle_of_a_split_loses_nothing_and_a_restart_finishes_it(
    spawn_sidecar, start_sidecar, moto_endpoint, point
):
    bucket, uri = nolist_bucket(moto_endpoint)
    setup = start_sidecar(uri)
    memory_core(setup).index.page_max = 4
    before = ["a", "b", "c", "d"]
    for key in before:
        put(setup.memory, key, "1")
    stop(setup)
    assert len(bucket_pages(moto_endpoint, bucket)) == 1

    env = {"CTXD_INDEX_PAGE_MAX": "4"}
    crashing = spawn_sidecar("--store", uri, env={**env, "CTXD_CRASH_POINT": point})
    fails(lambda: put(crashing.running().memory, "victim", "1"))
    assert crashing.proc.wait(10) == 70  # it exited in the middle of the split
    crashing.kill()

    # The root still names the sealed page, which holds every name.
    (sealed,) = bucket_pages(moto_endpoint, bucket)
    assert "split" in sealed and sorted(sealed["keys"]) == [*before, "victim"]

    restarted = spawn_sidecar("--store", uri, env=env).running()
    assert [r.key for r in list_all(restarted.memory)] == before  # no value behind "victim"
    put(restarted.memory, "e", "1")  # a write to the range finishes the split
    put(restarted.memory, "victim", "2")
    pages = bucket_pages(moto_endpoint, bucket)
    assert len(pages) >= 2 and all("split" not in p and len(p["keys"]) <= 4 for p in pages)
    assert [r.key for r in list_all(restarted.memory, limit=2)] == [*before, "e", "victim"]


def test_an_old_single_record_index_on_s3_migrates_and_keeps_every_name(
    start_sidecar, moto_endpoint
):
    bucket, uri = nolist_bucket(moto_endpoint)
    first = start_sidecar(uri)
    keys = [f"k{i:02d}" for i in range(30)]
    for key in keys:
        put(first.memory, key, "1")
    stop(first)
    # Today's format: one record listing every name.
    s3 = s3_client(moto_endpoint)
    old = {key: {"a": {"oldwriter": int(time.time() * 1000)}} for key in keys}
    s3.put_object(Bucket=bucket, Key=ROOT, Body=json.dumps({"v": 1, "keys": old}).encode())

    r = start_sidecar(uri)
    memory_core(r).index.page_max = 8
    assert [x.key for x in list_all(r.memory, limit=4)] == keys  # read as is
    put(r.memory, "new", "1")
    root = read_json(moto_endpoint, bucket, ROOT)
    assert root["v"] == 2 and len(root["pages"]) >= 4
    assert [x.key for x in list_all(r.memory, limit=5)] == sorted([*keys, "new"])
