"""The Python client's memory search verbs, sync and async, over real gRPC:
vectors on set, ranking, filter and paging, the sidecar's errors as the
client's exceptions."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python"))

from ctxd_client import AsyncClient, Client  # noqa: E402
from ctxd_client.errors import FailedPrecondition, InvalidArgument  # noqa: E402


def test_sync_search(start_sidecar):
    running = start_sidecar("memory://")
    with Client(running.address) as c:
        c.memory_set("s/a", {"kind": "fruit"}, vectors={"text": [1, 0, 0]})
        c.memory_set("s/b", {"kind": "veg"}, vectors={"text": [0.8, 0.2, 0]})
        c.memory_set("s/c", {"kind": "fruit"}, vectors={"text": [0, 1, 0]})
        hits = c.memory_search("s/", query=[1, 0, 0], include_values=True)
        assert [h.record.key for h in hits] == ["s/a", "s/b", "s/c"]
        assert hits[0].score == pytest.approx(1.0) and hits[0].record.value_json
        fruit = c.memory_search("s/", query=[1, 0, 0], filter={"kind": "fruit"}, offset=1)
        assert [h.record.key for h in fruit] == ["s/c"]
        with pytest.raises(InvalidArgument, match="2 dimensions"):
            c.memory_search("s/", query=[1, 0])
        with pytest.raises(FailedPrecondition, match="memory.embedder"):
            c.memory_search("s/", query="apples")


async def test_async_search(start_sidecar):
    running = start_sidecar("memory://")
    async with AsyncClient(running.address) as c:
        await c.memory_set("s/a", {"t": 1}, vectors={"text": [0, 0, 1]})
        await c.memory_set("s/b", {"t": 2}, vectors={"text": [0, 1, 0]})
        hits = await c.memory_search("s/", query=[0, 0.1, 1], limit=1)
        assert [h.record.key for h in hits] == ["s/a"] and hits[0].field == "text"
