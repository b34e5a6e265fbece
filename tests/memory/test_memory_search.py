"""MemoryService.Search over real gRPC on every backend (PostgreSQL too):
ranking by vectors, prefix, filter, limit/offset, TTL and deletes covering
the vectors, restarts rebuilding the index, the dimension check and the
bad-input statuses; the embedder against an OpenAI-compatible server on
loopback."""

from __future__ import annotations

import json

import grpc
import pytest

from ctxd_sidecar.api.ctxd.v1 import memory_pb2 as pb
from tests.support.fake_openai import FakeOpenAI, word_vector
from tests.support.memory_helpers import assert_bad_field, fails, get, put, stop, use_clock


def vec(field: str, *values: float) -> pb.Vector:
    return pb.Vector(field=field, values=list(values))


def search(stub, *query: float, **kw) -> list[pb.SearchHit]:
    return list(stub.Search(pb.SearchRequest(query_vector=list(query), **kw), timeout=30).hits)


def keys(hits) -> list[str]:
    return [h.record.key for h in hits]


def seed(stub) -> None:
    put(stub, "n/a", '{"kind":"fruit","n":1}', vectors=[vec("text", 1, 0, 0)])
    put(stub, "n/b", '{"kind":"veg","n":2}', vectors=[vec("text", 0.9, 0.1, 0)])
    put(stub, "n/c", '{"kind":"fruit","n":3}', vectors=[vec("text", 0, 1, 0)])
    put(stub, "m/d", '{"kind":"fruit","n":4}', vectors=[vec("text", 1, 0, 0)])
    put(stub, "n/plain", '{"kind":"fruit"}')  # no vectors: never a hit


@pytest.fixture(params=["memory", "lmdb", "s3", "s3-nolist", "postgres"])
def any_store(request, store_uri_for) -> str:
    return store_uri_for(request.param)


def test_search_ranks_filters_and_pages_on_every_store(start_sidecar, any_store):
    stub = start_sidecar(any_store).memory
    seed(stub)
    hits = search(stub, 1, 0, 0, prefix="n/")
    assert keys(hits) == ["n/a", "n/b", "n/c"]
    assert hits[0].score == pytest.approx(1.0, abs=1e-6) and hits[0].field == "text"
    assert hits[0].score > hits[1].score > hits[2].score
    assert hits[0].record.value_json == ""
    assert keys(search(stub, 1, 0, 0, prefix="n/", limit=1, offset=1)) == ["n/b"]
    kept = search(stub, 1, 0, 0, filter_json='{"kind":"fruit"}', include_values=True)
    assert sorted(keys(kept)) == ["m/d", "n/a", "n/c"]
    assert json.loads(kept[0].record.value_json)["kind"] == "fruit"
    assert keys(search(stub, 1, 0, 0, filter_json='{"n":{"$gte":3}}')) == ["m/d", "n/c"]


def test_vectors_go_with_deletes_overwrites_and_ttl(start_sidecar):
    running = start_sidecar("memory://")
    stub = running.memory
    clock = use_clock(running)
    seed(stub)
    stub.Delete(pb.DeleteRequest(key="n/a"), timeout=30)
    put(stub, "n/b", '{"kind":"veg"}')  # rewritten without vectors: no longer found
    put(stub, "n/c", '{"kind":"fruit"}', vectors=[vec("text", 1, 0, 0)], ttl_seconds=5)
    assert keys(search(stub, 1, 0, 0, prefix="n/")) == ["n/c"]
    clock.advance(6)
    assert keys(search(stub, 1, 0, 0, prefix="n/")) == []


def test_index_is_rebuilt_from_the_store_at_start(start_sidecar, tmp_path):
    uri = f"lmdb://{tmp_path / 'db'}"
    first = start_sidecar(uri)
    seed(first.memory)
    stop(first)
    again = start_sidecar(uri)
    assert keys(search(again.memory, 1, 0, 0, prefix="n/")) == ["n/a", "n/b", "n/c"]
    err = fails(lambda: search(again.memory, 1, 0))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "2 dimensions" in err.details() and "has 3" in err.details()


def test_bad_input_statuses_and_nothing_stored_harmed(start_sidecar):
    stub = start_sidecar("memory://").memory
    seed(stub)
    cases = [
        (lambda: put(stub, "n/x", "1", vectors=[vec("text", 1, 0)]), "vectors[text]"),
        (lambda: put(stub, "n/x", "1", vectors=[vec("text")]), "vectors[text]"),
        (lambda: put(stub, "n/x", "1", vectors=[vec("t", float("nan"), 0, 0)]), "vectors[t]"),
        (lambda: put(stub, "n/x", "1", vectors=[vec("", 1, 0, 0)]), "vectors"),
        (lambda: search(stub, 1, 0), "query_vector"),
        (lambda: search(stub), "query"),
        (lambda: search(stub, 1, 0, 0, filter_json="[1]"), "filter_json"),
        (lambda: search(stub, 1, 0, 0, filter_json="{"), "filter_json"),
        (lambda: search(stub, 1, 0, 0, offset=-1), "offset"),
        (lambda: search(stub, 1, 0, 0, limit=-1), "limit"),
        (lambda: search(stub, 1, 0, 0, prefix="_x"), "prefix"),
    ]
    for bad, field in cases:
        err = fails(bad)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (field, err.details())
        assert_bad_field(err, field)
    text = fails(lambda: stub.Search(pb.SearchRequest(query_text="apples"), timeout=30))
    assert text.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "memory.embedder" in text.details()
    embed = fails(lambda: put(stub, "n/x", '{"t":"a"}', embed_fields=["t"]))
    assert embed.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert fails(lambda: get(stub, "n/x")).code() == grpc.StatusCode.NOT_FOUND
    assert keys(search(stub, 1, 0, 0, prefix="n/")) == ["n/a", "n/b", "n/c"]


@pytest.fixture
def fake_openai():
    with FakeOpenAI() as server:
        yield server


def test_embedder_plugin_against_an_openai_compatible_server(start_sidecar, fake_openai):
    stub = start_sidecar(
        "memory://",
        memory__embedder="openai",
        embedder__openai__base_url=fake_openai.base_url,
        embedder__openai__model="embed-small",
    ).memory
    put(
        stub, "d/1", '{"text":"red apples and green pears","tags":["fruit"]}', embed_fields=["text"]
    )
    put(stub, "d/2", '{"text":"the train leaves at noon"}', embed_fields=["text"])
    put(stub, "d/3", '{"text":"x","tags":["fruit","apples"]}', embed_fields=["tags[*]"])
    hits = stub.Search(pb.SearchRequest(query_text="apples", prefix="d/"), timeout=30).hits
    assert keys(hits)[:2] == ["d/3", "d/1"] or keys(hits)[:2] == ["d/1", "d/3"]
    assert keys(hits)[-1] == "d/2"
    assert {h.field for h in hits if h.record.key == "d/3"} == {"tags[*]#1"}
    by_vector = search(stub, *word_vector("the train"), prefix="d/", limit=1)
    assert keys(by_vector) == ["d/2"]
    sent = [r.body for r in fake_openai.requests]
    assert sent[0]["model"] == "embed-small" and sent[0]["input"] == ["red apples and green pears"]
    assert sent[2]["input"] == ["fruit", "apples"]


def test_embedder_down_is_unavailable_and_stores_nothing(start_sidecar, fake_openai):
    fake_openai.mode = "unauthorized"
    stub = start_sidecar(
        "memory://",
        memory__embedder="openai",
        embedder__openai__base_url=fake_openai.base_url,
        embedder__openai__model="m",
        embedder__openai__max_retries=0,
    ).memory
    err = fails(lambda: put(stub, "d/1", '{"text":"a"}', embed_fields=["text"]))
    assert err.code() == grpc.StatusCode.UNAVAILABLE
    assert "HTTP 401" in err.details() and fake_openai.base_url in err.details()
    assert fails(lambda: get(stub, "d/1")).code() == grpc.StatusCode.NOT_FOUND


def test_embedder_settings_are_checked_in_one_line():
    from ctxd_sidecar.config.loader import load_config as load

    with pytest.raises(ValueError, match=r"memory.embedder .*embedder.openai.base_url") as exc:
        load(env={}, overrides={"memory.embedder": "openai"})
    assert "\n" not in str(exc.value)
    with pytest.raises(ValueError, match="embedder.openai.dimensions") as exc:
        load(env={}, overrides={"embedder.openai.dimensions": -1})


def test_migrate_carries_the_vectors_and_their_index(start_sidecar, tmp_path):
    import subprocess
    import sys

    src, dst = f"lmdb://{tmp_path / 'src'}", f"lmdb://{tmp_path / 'dst'}"
    first = start_sidecar(src, memory__search_metric="dot")
    seed(first.memory)
    stop(first)
    cmd = [sys.executable, "-m", "ctxd_sidecar", "migrate", "--from", src, "--to", dst]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    moved = start_sidecar(dst).memory  # configured for cosine: the stored metric wins
    hits = search(moved, 1, 0, 0, prefix="n/")
    assert keys(hits) == ["n/a", "n/b", "n/c"]
    assert hits[1].score == pytest.approx(0.9, abs=1e-6)  # n/b's inner product, not its cosine
    assert fails(lambda: search(moved, 1, 0)).code() == grpc.StatusCode.INVALID_ARGUMENT
