"""CtxdStore's semantic search against LangGraph's own InMemoryStore, both
with the same embeddings (word buckets, run on the client): the same items
in the same order with the same scores, for ``index`` fields, ``put(index=
False | [fields])``, filters, offsets, the async API, and the sidecar's
embedder (``"embed": "ctxd"``) against an OpenAI-compatible server."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest

pytest.importorskip("langgraph.store.memory")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python"))

from langchain_core.embeddings import Embeddings  # noqa: E402
from langgraph.store.memory import InMemoryStore  # noqa: E402

from ctxd_client.integrations.langgraph import CtxdStore  # noqa: E402
from tests.support.fake_openai import FakeOpenAI, word_vector  # noqa: E402

DIMS = 32


class WordEmbeddings(Embeddings):
    def __init__(self) -> None:
        self.calls = 0

    def embed_documents(self, texts):
        self.calls += 1
        return [word_vector(t, DIMS) for t in texts]

    def embed_query(self, text):
        return word_vector(text, DIMS)


DOCS = {
    "a": {"text": "red apples are sweet", "kind": "fruit", "n": 1},
    "b": {"text": "green pears and apples", "kind": "fruit", "n": 2},
    "c": {"text": "the train leaves at noon", "kind": "travel", "n": 3},
    "d": {"text": "carrots are orange", "kind": "veg", "n": 4, "notes": ["apples pie"]},
}


@pytest.fixture(scope="module")
def address(start_module_sidecar) -> str:
    return start_module_sidecar("lmdb").address


def stores(address, **index):
    config = {"dims": DIMS, "embed": WordEmbeddings(), **index}
    ours = CtxdStore(address, prefix=f"lgs{uuid.uuid4().hex[:8]}", index=config)
    return ours, InMemoryStore(index=config)


def fill(store, **put) -> None:
    for key, value in DOCS.items():
        store.put(("docs", "x"), key, value, **put)


def same(ours, theirs, *args, **kw) -> list:
    got = ours.search(*args, **kw)
    want = theirs.search(*args, **kw)
    assert [(i.namespace, i.key, i.value) for i in got] == [
        (i.namespace, i.key, i.value) for i in want
    ]
    for g, w in zip(got, want, strict=True):
        assert (g.score is None) == (w.score is None)
        if w.score is not None:
            assert g.score == pytest.approx(w.score, abs=1e-5)
    return got


def test_search_matches_inmemory_store(address):
    ours, theirs = stores(address, fields=["text"])
    fill(ours)
    fill(theirs)
    hits = same(ours, theirs, ("docs",), query="apples")
    assert [h.key for h in hits][:2] in (["a", "b"], ["b", "a"])
    same(ours, theirs, ("docs",), query="apples", limit=2, offset=1)
    same(ours, theirs, ("docs",), query="apples", filter={"kind": "fruit"})
    same(ours, theirs, ("docs",), query="train", filter={"n": {"$gte": 2}})
    same(ours, theirs, ("docs",), filter={"kind": "fruit"})  # no query: listing
    ours.close()


def test_put_index_false_and_fields(address):
    ours, theirs = stores(address, fields=["text"])
    for store in (ours, theirs):
        store.put(("docs", "x"), "a", DOCS["a"])
        store.put(("docs", "x"), "c", DOCS["c"], index=False)  # unscored, fills the page
        store.put(("docs", "x"), "d", DOCS["d"], index=["notes[*]"])
    hits = same(ours, theirs, ("docs",), query="apples pie")
    assert [h.key for h in hits] == ["d", "a", "c"] and hits[-1].score is None
    # A put replaces the item's vectors with its own (none with index=False).
    ours.put(("docs", "x"), "d", DOCS["d"], index=False)
    assert [h.score is None for h in ours.search(("docs",), query="apples pie")] == [
        False,
        True,
        True,
    ]
    ours.close()


async def test_async_search_runs_the_async_embeddings(address):
    ours, theirs = stores(address, fields=["text"])
    for key, value in DOCS.items():
        await ours.aput(("docs",), key, value)
        await theirs.aput(("docs",), key, value)
    got = await ours.asearch(("docs",), query="noon train", limit=1)
    want = await theirs.asearch(("docs",), query="noon train", limit=1)
    assert [i.key for i in got] == [i.key for i in want] == ["c"]
    assert got[0].score == pytest.approx(want[0].score, abs=1e-5)


def test_the_sidecars_embedder(start_sidecar):
    with FakeOpenAI() as server:
        running = start_sidecar(
            "memory://",
            memory__embedder="openai",
            embedder__openai__base_url=server.base_url,
            embedder__openai__model="m",
        )
        store = CtxdStore(
            running.address, index={"dims": DIMS, "embed": "ctxd", "fields": ["text"]}
        )
        fill(store)
        hits = store.search(("docs",), query="the train at noon", limit=2)
        assert hits[0].key == "c" and hits[0].score > hits[1].score
        store.close()
