"""MemoryService over real gRPC on every backend: exact round trips, key
rules, strict JSON, versions, TTL, caps, listing and instance isolation."""

from __future__ import annotations

import concurrent.futures
import time
import uuid

import boto3
import grpc
import pytest

from ctxd_sidecar.api.ctxd.v1 import memory_pb2 as pb
from tests.support.memory_helpers import (
    assert_bad_field,
    assert_cap,
    call,
    fails,
    get,
    list_all,
    memory_core,
    put,
    stop,
    use_clock,
)

ROUND_TRIP_VALUES = [
    "12345678901234567890123",
    '{"id": 12345678901234567890123, "neg": -98765432109876543210}',
    "1.10",
    "-0.0e+00",
    "1E400",
    '"héllo ünïcode 日本語 ключ"',
    '"😀 👩‍👩‍👧 🏳️‍🌈"',
    r'"\ud83d\ude00 \u00e9 \" \\ \/"',
    '{"a": [1, {"b": [true, false, null]}], "c": {"d": {"e": "f"}}, "": ""}',
    "  [1,  2 ,3]\n\t",
    "null",
    "[]",
    "{}",
    '"' + "x" * 5000 + '"',
]


def test_values_round_trip_byte_for_byte(sidecar):
    stub = sidecar.memory
    for i, value in enumerate(ROUND_TRIP_VALUES):
        rec = put(stub, f"rt/{i}", value, by="agent-7")
        assert rec.value_json == value
        assert rec.by == "agent-7"
        got = get(stub, f"rt/{i}")
        assert got.value_json == value
        assert (got.version, got.updated_ms, got.by) == (rec.version, rec.updated_ms, "agent-7")
    listed = list_all(stub, "rt/", include_values=True)
    assert {r.key: r.value_json for r in listed} == {
        f"rt/{i}": v for i, v in enumerate(ROUND_TRIP_VALUES)
    }
    assert all(r.value_json == "" for r in list_all(stub, "rt/"))


def test_nesting_exactly_at_the_bound_is_accepted_and_one_deeper_is_not(start_sidecar):
    stub = start_sidecar("memory://", memory__max_depth=5).memory
    assert put(stub, "deep", "[[[[[1]]]]]").value_json == "[[[[[1]]]]]"
    assert put(stub, "deep2", '{"a":{"b":[{"c":["]]]]]]"]}]}}').value_json  # brackets in strings
    assert_bad_field(fails(lambda: put(stub, "deep", "[[[[[[1]]]]]]")), "value_json")
    assert get(stub, "deep").value_json == "[[[[[1]]]]]"


BAD_KEYS = [
    ("", "empty"),
    ("x" * 257, "257 characters"),
    ("_private", "reserved"),
    ("a b", "whitespace"),
    ("tab\there", "whitespace"),
    ("line\nbreak", "whitespace"),
    ("nbsp\u00a0x", "whitespace"),
    ("ctl\x01x", "control"),
    ("del\x7fx", "control"),
    ("c1\x85x", "control"),
    ("/leading", "empty segment"),
    ("trailing/", "empty segment"),
    ("a//b", "empty segment"),
    (".", "dot segment"),
    ("..", "dot segment"),
    ("a/./b", "dot segment"),
    ("a/../b", "dot segment"),
    ("../other-instance/memory/x", "dot segment"),
    ("a/..", "dot segment"),
]


def test_every_key_rule_is_enforced_on_every_call(sidecar):
    stub = sidecar.memory
    put(stub, "kept", '"safe"')
    for key, why in BAD_KEYS:
        for rpc in (
            lambda k=key: stub.Set(pb.SetRequest(key=k, value_json="1")),
            lambda k=key: stub.Get(pb.GetRequest(key=k)),
            lambda k=key: stub.Delete(pb.DeleteRequest(key=k)),
        ):
            err = fails(rpc)
            assert_bad_field(err, "key")
            assert err.details().startswith("key: "), (why, err.details())
    assert [r.key for r in list_all(stub)] == ["kept"]


def test_keys_that_follow_the_rules_are_accepted(sidecar):
    stub = sidecar.memory
    keys = [
        "a",
        "x" * 256,
        "user/42/prefs",
        "日本/ключ/😀",
        "a.b",
        "a/.../b",
        "..x",
        "x..",
        "-",
        "a_b",
    ]
    for key in keys:
        assert put(stub, key, '"v"').key == key
        assert get(stub, key).key == key
    assert sorted(r.key for r in list_all(stub)) == sorted(keys)


def test_a_key_longer_than_the_store_allows_names_the_key(start_sidecar, store_uri_for):
    # 256 four-byte characters are 1 KiB of UTF-8: more than LMDB keys can hold.
    stub = start_sidecar(store_uri_for("lmdb")).memory
    err = fails(lambda: put(stub, "😀" * 256))
    assert_bad_field(err, "key")
    assert "lmdb" in err.details()


INVALID_JSON = [
    "",
    "   ",
    "NaN",
    "nan",
    "Infinity",
    "-Infinity",
    "[1, NaN]",
    '{"a": Infinity}',
    "{'a': 1}",
    "[1,]",
    '{"a": 1',
    '{"a" 1}',
    "01",
    "1 2",
    "undefined",
    '"unterminated',
    "tru",
    '"bad escape \\x"',
    '"raw\ncontrol"',
    "[" * 65 + "]" * 65,
    "[" * 5000 + "]" * 5000,
]


def test_invalid_json_is_rejected_and_leaves_the_stored_value_alone(sidecar):
    stub = sidecar.memory
    original = put(stub, "doc", '{"ok": true}')
    for bad in INVALID_JSON:
        err = fails(lambda b=bad: put(stub, "doc", b))
        assert_bad_field(err, "value_json")
        fails_new = fails(lambda b=bad: put(stub, "new", b))
        assert_bad_field(fails_new, "value_json")
    after = get(stub, "doc")
    assert (after.value_json, after.version) == ('{"ok": true}', original.version)
    assert fails(lambda: get(stub, "new")).code() == grpc.StatusCode.NOT_FOUND


def test_other_bad_fields_are_named(sidecar):
    stub = sidecar.memory
    assert_bad_field(fails(lambda: put(stub, "k", ttl_seconds=-1)), "ttl_seconds")
    assert_bad_field(fails(lambda: put(stub, "k", ttl_seconds=10**12)), "ttl_seconds")
    assert_bad_field(
        fails(lambda: put(stub, "k", create_only=True, expected_version="v")), "create_only"
    )
    assert_bad_field(fails(lambda: put(stub, "k", by="x" * 257)), "by")
    assert_bad_field(fails(lambda: put(stub, "k", by="two\nlines")), "by")
    assert_bad_field(fails(lambda: put(stub, "k", expected_version="v" * 300)), "expected_version")
    list_ = sidecar.memory.List
    assert_bad_field(fails(lambda: list_(pb.ListRequest(limit=-1))), "limit")
    assert_bad_field(fails(lambda: list_(pb.ListRequest(prefix="a b"))), "prefix")
    assert_bad_field(fails(lambda: list_(pb.ListRequest(prefix="_"))), "prefix")
    assert_bad_field(fails(lambda: list_(pb.ListRequest(prefix="../"))), "prefix")
    assert_bad_field(fails(lambda: list_(pb.ListRequest(page_token="garbage!"))), "page_token")
    assert list_all(stub) == []


def test_get_of_a_missing_key_is_not_found(sidecar):
    err = fails(lambda: get(sidecar.memory, "nope"))
    assert err.code() == grpc.StatusCode.NOT_FOUND
    assert "nope" in err.details()


def test_compare_and_set_with_versions(sidecar):
    stub = sidecar.memory
    first = put(stub, "cas", "1", create_only=True)
    assert first.version and get(stub, "cas").version == first.version

    err = fails(lambda: put(stub, "cas", "2", create_only=True))
    assert err.code() == grpc.StatusCode.ABORTED

    second = put(stub, "cas", "2", expected_version=first.version)
    assert second.version != first.version
    err = fails(lambda: put(stub, "cas", "3", expected_version=first.version))
    assert err.code() == grpc.StatusCode.ABORTED
    assert get(stub, "cas").value_json == "2"

    err = fails(lambda: put(stub, "missing", "1", expected_version=first.version))
    assert err.code() == grpc.StatusCode.ABORTED
    assert fails(lambda: get(stub, "missing")).code() == grpc.StatusCode.NOT_FOUND

    err = fails(lambda: stub.Delete(pb.DeleteRequest(key="cas", expected_version=first.version)))
    assert err.code() == grpc.StatusCode.ABORTED
    assert get(stub, "cas").value_json == "2"
    assert stub.Delete(pb.DeleteRequest(key="cas", expected_version=second.version)).deleted
    assert fails(lambda: get(stub, "cas")).code() == grpc.StatusCode.NOT_FOUND

    assert not stub.Delete(pb.DeleteRequest(key="cas")).deleted
    err = fails(lambda: stub.Delete(pb.DeleteRequest(key="cas", expected_version=second.version)))
    assert err.code() == grpc.StatusCode.ABORTED
    assert put(stub, "cas", '"again"', create_only=True).value_json == '"again"'


def test_ttl_expiry_with_a_controlled_clock(sidecar):
    stub, core = sidecar.memory, memory_core(sidecar)
    clock = use_clock(sidecar)
    rec = put(stub, "short", '"soon gone"', ttl_seconds=60)
    put(stub, "forever", '"stays"')
    put(stub, "long", '"later"', ttl_seconds=3600)
    assert rec.expires_at_ms == rec.updated_ms + 60_000
    assert get(stub, "forever").expires_at_ms == 0
    assert get(stub, "short").value_json == '"soon gone"'

    clock.advance(59.9)
    assert get(stub, "short").value_json == '"soon gone"'
    clock.advance(0.1)  # exactly at expires_at: expired
    assert fails(lambda: get(stub, "short")).code() == grpc.StatusCode.NOT_FOUND
    assert [r.key for r in list_all(stub)] == ["forever", "long"]
    # Still stored until the sweep: invisible, not yet deleted.
    assert call(sidecar, core.storage.get("memory/short")) is not None
    assert core.keys == 3
    # Create-only and Delete treat an expired record as absent.
    assert not sidecar.memory.Delete(pb.DeleteRequest(key="short")).deleted
    put(stub, "short", '"back"', ttl_seconds=60)
    clock.advance(60)

    assert call(sidecar, core.sweep()) == 1
    assert call(sidecar, core.storage.get("memory/short")) is None
    assert core.keys == 2
    assert [r.key for r in list_all(stub)] == ["forever", "long"]
    clock.advance(3600)
    assert call(sidecar, core.sweep()) == 1
    assert [r.key for r in list_all(stub)] == ["forever"]
    if core.index.active:
        assert list(call(sidecar, core.index.entries())) == ["forever"]


def test_rewriting_a_key_resets_or_removes_its_ttl(sidecar):
    stub, core = sidecar.memory, memory_core(sidecar)
    clock = use_clock(sidecar)
    put(stub, "k", "1", ttl_seconds=10)
    put(stub, "k", "2")  # no TTL now
    clock.advance(11)
    assert call(sidecar, core.sweep()) == 0
    assert get(stub, "k").value_json == "2"
    put(stub, "k", "3", ttl_seconds=10)
    clock.advance(5)
    put(stub, "k", "4", ttl_seconds=10)
    clock.advance(6)
    assert get(stub, "k").value_json == "4"


@pytest.mark.parametrize("backend", ["lmdb", "s3", "s3-nolist"])
def test_expiry_is_absolute_and_survives_a_restart(start_sidecar, store_uri_for, backend):
    uri = store_uri_for(backend)
    first = start_sidecar(uri)
    put(first.memory, "ttl", "1", ttl_seconds=30)
    put(first.memory, "keep", "2")
    stop(first)
    second = start_sidecar(uri)
    assert get(second.memory, "ttl").value_json == "1"
    core = memory_core(second)
    assert (core.keys, len(core._expiry)) == (2, 1)  # counted and scheduled at start-up
    use_clock(second).advance(31)
    assert fails(lambda: get(second.memory, "ttl")).code() == grpc.StatusCode.NOT_FOUND
    assert call(second, core.sweep()) == 1
    assert [r.key for r in list_all(second.memory)] == ["keep"]


def test_ttl_expires_in_real_time_and_the_sweeper_deletes_it(start_sidecar, store_uri_for):
    running = {
        backend: start_sidecar(store_uri_for(backend), memory__sweep_interval=0.2)
        for backend in ("memory", "lmdb", "s3", "s3-nolist")
    }
    for r in running.values():
        put(r.memory, "blink", '"now you see me"', ttl_seconds=1)
        put(r.memory, "stay", "1")
    deadline = time.time() + 20
    for backend, r in running.items():
        core = memory_core(r)
        while call(r, core.storage.get("memory/blink")) is not None:
            assert time.time() < deadline, f"{backend}: the sweeper did not delete the record"
            time.sleep(0.1)
        assert fails(lambda r=r: get(r.memory, "blink")).code() == grpc.StatusCode.NOT_FOUND
        assert [x.key for x in list_all(r.memory)] == ["stay"], backend
        assert core.keys == 1


def test_value_cap_counts_bytes_and_accepts_exactly_the_cap(start_sidecar, store_uri):
    stub = start_sidecar(store_uri, memory__max_value_bytes=100).memory
    at_cap = '"' + "é" * 49 + '"'  # 2 + 98 bytes of UTF-8, 51 characters
    assert len(at_cap.encode()) == 100
    assert put(stub, "v", at_cap).value_json == at_cap
    over = '"' + "é" * 49 + 'x"'
    assert_cap(fails(lambda: put(stub, "v", over)), "memory.max_value_bytes", 100)
    assert get(stub, "v").value_json == at_cap


def test_key_cap_counts_keys_not_writes(start_sidecar, store_uri):
    r = start_sidecar(store_uri, memory__max_keys=3)
    stub = r.memory
    for k in "abc":
        put(stub, k, "1")
    err = fails(lambda: put(stub, "d", "1"))
    assert_cap(err, "memory.max_keys", 3)
    put(stub, "a", "2")  # overwriting at the cap is fine
    assert stub.Delete(pb.DeleteRequest(key="b")).deleted
    put(stub, "d", "1")
    assert_cap(fails(lambda: put(stub, "e", "1")), "memory.max_keys", 3)
    assert sorted(x.key for x in list_all(stub)) == ["a", "c", "d"]


def test_total_bytes_cap(start_sidecar, store_uri):
    stub = start_sidecar(store_uri, memory__max_total_bytes=50).memory
    put(stub, "a", '"' + "x" * 28 + '"')  # 30 bytes
    put(stub, "b", '"' + "y" * 18 + '"')  # 20 bytes: exactly 50
    assert_cap(fails(lambda: put(stub, "c", "1")), "memory.max_total_bytes", 50)
    assert_cap(fails(lambda: put(stub, "b", '"' + "y" * 19 + '"')), "memory.max_total_bytes", 50)
    put(stub, "a", '"short"')  # shrinking is always fine
    put(stub, "c", '"' + "z" * 21 + '"')  # 23 bytes freed, 23 used
    assert_cap(fails(lambda: put(stub, "d", "1")), "memory.max_total_bytes", 50)


def test_expired_records_do_not_count_against_caps(start_sidecar, store_uri):
    r = start_sidecar(store_uri, memory__max_keys=2, memory__sweep_interval=0)
    clock = use_clock(r)
    put(r.memory, "t1", "1", ttl_seconds=5)
    put(r.memory, "t2", "1", ttl_seconds=5)
    assert_cap(fails(lambda: put(r.memory, "n1", "1")), "memory.max_keys", 2)
    clock.advance(5)
    put(r.memory, "n1", "1")
    put(r.memory, "n2", "1")
    assert [x.key for x in list_all(r.memory)] == ["n1", "n2"]


@pytest.mark.parametrize("backend", ["lmdb", "s3-nolist"])
def test_caps_hold_across_a_restart(start_sidecar, store_uri_for, backend):
    uri = store_uri_for(backend)
    first = start_sidecar(uri, memory__max_keys=3)
    for k in "abc":
        put(first.memory, k, '"0123456789"')
    stop(first)
    second = start_sidecar(uri, memory__max_keys=3)
    assert (memory_core(second).keys, memory_core(second).total_bytes) == (3, 36)
    assert_cap(fails(lambda: put(second.memory, "d", "1")), "memory.max_keys", 3)


def test_concurrent_writes_never_overshoot_the_key_cap(start_sidecar, store_uri):
    r = start_sidecar(store_uri, memory__max_keys=20)
    results = []

    def attempt(i):
        try:
            put(r.memory, f"k{i:03d}", "1")
            results.append(True)
        except grpc.RpcError as err:
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            results.append(False)

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(attempt, range(60)))
    assert results.count(True) == 20
    assert len(list_all(r.memory)) == 20
    assert memory_core(r).keys == 20


def test_listing_is_sorted_by_utf8_and_filtered_by_prefix(sidecar):
    stub = sidecar.memory
    keys = ["b/2", "a", "日本", "b/1", "é", "z", "b/10", "ba", "😀", "Z"]
    for k in keys:
        put(stub, k, f'"{k}"')
    assert [r.key for r in list_all(stub)] == sorted(keys, key=lambda k: k.encode())
    assert [r.key for r in list_all(stub, "b/")] == ["b/1", "b/10", "b/2"]
    assert [r.key for r in list_all(stub, "b")] == ["b/1", "b/10", "b/2", "ba"]
    assert [r.key for r in list_all(stub, "日")] == ["日本"]
    assert list_all(stub, "nothing/") == []
    page = stub.List(pb.ListRequest(prefix="b", limit=2))
    assert [r.key for r in page.records] == ["b/1", "b/10"] and page.next_page_token
    rest = stub.List(pb.ListRequest(prefix="b", limit=2, page_token=page.next_page_token))
    assert [r.key for r in rest.records] == ["b/2", "ba"] and not rest.next_page_token
    err = fails(lambda: stub.List(pb.ListRequest(prefix="a", page_token=page.next_page_token)))
    assert_bad_field(err, "page_token")


def test_listing_skips_expired_records_and_still_fills_pages(sidecar):
    stub = sidecar.memory
    clock = use_clock(sidecar)
    for i in range(30):
        put(stub, f"k{i:02d}", "1", ttl_seconds=10 if i % 3 == 0 else 0)
    clock.advance(10)
    page = stub.List(pb.ListRequest(limit=7))
    assert [r.key for r in page.records] == [f"k{i:02d}" for i in range(30) if i % 3][:7]
    assert [r.key for r in list_all(stub, limit=7)] == [f"k{i:02d}" for i in range(30) if i % 3]
    last = stub.List(pb.ListRequest(limit=20))
    assert len(last.records) == 20 and not last.next_page_token


def test_listing_records_carry_metadata(sidecar):
    stub = sidecar.memory
    rec = put(stub, "m", '{"v": 1}', ttl_seconds=100, by="planner")
    (listed,) = list_all(stub)
    assert (listed.key, listed.version, listed.updated_ms, listed.expires_at_ms, listed.by) == (
        "m",
        rec.version,
        rec.updated_ms,
        rec.expires_at_ms,
        "planner",
    )


@pytest.mark.parametrize("backend", ["memory", "lmdb", "s3-nolist"])
def test_pagination_over_more_than_a_thousand_keys(start_sidecar, store_uri_for, backend):
    # S3 with listing is left out only for time: moto serves ~200 requests/s here.
    r = start_sidecar(store_uri_for(backend), memory__sweep_interval=0)
    keys = [f"bulk/{i:05d}" for i in range(1001)]
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: put(r.memory, k, f'{{"k": "{k}"}}'), keys))
    put(r.memory, "other", "1")
    assert memory_core(r).keys == 1002

    first = r.memory.List(pb.ListRequest(prefix="bulk/", limit=5000, include_values=True))
    assert len(first.records) == 1000 and first.next_page_token  # limit capped at 1000
    assert [x.key for x in first.records] == keys[:1000]
    assert first.records[17].value_json == f'{{"k": "{keys[17]}"}}'
    last = r.memory.List(pb.ListRequest(prefix="bulk/", page_token=first.next_page_token))
    assert [x.key for x in last.records] == keys[1000:] and not last.next_page_token
    default = r.memory.List(pb.ListRequest())
    assert [x.key for x in default.records] == keys[:100]  # the default page size
    assert default.next_page_token
    if memory_core(r).index.active:
        assert len(call(r, memory_core(r).index.entries())) == 1002


def test_instances_sharing_a_bucket_are_isolated(start_sidecar, store_uri_for):
    for backend in ("s3", "s3-nolist"):
        uri = store_uri_for(backend)
        a = start_sidecar(uri, instance="alpha")
        b = start_sidecar(uri, instance="beta")
        put(a.memory, "secret", '"alpha only"')
        put(b.memory, "mine", '"beta"')
        assert fails(lambda b=b: get(b.memory, "secret")).code() == grpc.StatusCode.NOT_FOUND
        assert [x.key for x in list_all(b.memory)] == ["mine"]
        assert [x.key for x in list_all(a.memory)] == ["secret"]
        for key in ("../alpha/memory/secret", "../../ctxd/alpha/memory/secret"):
            assert_bad_field(fails(lambda b=b, k=key: get(b.memory, k)), "key")
        assert not b.memory.Delete(pb.DeleteRequest(key="secret")).deleted
        assert get(a.memory, "secret").value_json == '"alpha only"'


def test_pages_with_large_values_end_early_but_lose_nothing(start_sidecar, store_uri_for):
    from ctxd_sidecar.core.memory import MAX_PAGE_VALUE_BYTES

    r = start_sidecar(store_uri_for("lmdb"))
    value = '"' + "v" * (60 * 1024) + '"'
    count = MAX_PAGE_VALUE_BYTES // len(value) + 5
    for i in range(count):
        put(r.memory, f"big/{i:03d}", value)
    page = r.memory.List(pb.ListRequest(limit=1000, include_values=True))
    assert 0 < len(page.records) < count and page.next_page_token
    assert sum(len(x.value_json) for x in page.records) <= MAX_PAGE_VALUE_BYTES
    everything = list_all(r.memory, include_values=True, limit=1000)
    assert [x.key for x in everything] == [f"big/{i:03d}" for i in range(count)]
    assert all(x.value_json == value for x in everything)
    # Without values the same listing fits one page.
    assert len(r.memory.List(pb.ListRequest(limit=1000)).records) == count


def test_a_sidecar_started_while_the_store_is_down_serves_writes_once_it_is_back(
    start_sidecar, moto_endpoint
):
    from tests.conftest import s3_uri
    from tests.support.faultproxy import FaultProxy

    bucket = f"ctxd-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1").create_bucket(
        Bucket=bucket
    )
    proxy = FaultProxy(moto_endpoint).start()
    try:
        proxy.down()
        uri = s3_uri(proxy.url, bucket) + "&connect_timeout=1&read_timeout=1"
        r = start_sidecar(uri, memory__max_keys=1)
        err = fails(lambda: put(r.memory, "k", "1"))
        assert err.code() == grpc.StatusCode.UNAVAILABLE
        assert "not ready" in err.details() and "127.0.0.1" not in err.details()
        proxy.up()
        deadline = time.monotonic() + 30
        while not memory_core(r).counted:
            assert time.monotonic() < deadline, "memory never counted its records"
            time.sleep(0.1)
        put(r.memory, "k", "1")
        assert_cap(fails(lambda: put(r.memory, "k2", "1")), "memory.max_keys", 1)
    finally:
        proxy.stop()
