"""The OpenAI Agents SDK session (``CtxdSession``) over a conversation holding
items stored before native payloads were checked (seeded as an older sidecar
wrote them): ``get_items`` returns the whole session with each bad item read
as its message's conversion, and ``pop_item`` returns the item it removed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("agents")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python"))

from ctxd_client.integrations.openai_agents import CtxdSession  # noqa: E402
from tests.providers.test_responses_native import CONVERTED, GOOD, LEGACY, seed_legacy  # noqa: E402


@pytest.fixture
def sc(start_sidecar, store_uri_for):
    return start_sidecar(store_uri_for("lmdb"), contexts__auto_compact=False)


@pytest.fixture
async def make_session(sc):
    """A session holding GOOD, then the first ``n`` of LEGACY."""
    made: list[CtxdSession] = []

    async def make(n: int) -> CtxdSession:
        s = CtxdSession(f"legacy items {n}", sc.address)
        made.append(s)
        await s.add_items([GOOD])
        seed_legacy(sc, s.context_id, LEGACY[:n])
        return s

    yield make
    for s in made:
        await s.close()


async def test_get_items_reads_a_session_holding_bad_items(make_session):
    session = await make_session(len(LEGACY))
    assert await session.get_items() == [GOOD, *CONVERTED]
    assert await session.get_items(limit=2) == CONVERTED[-2:]


async def test_pop_item_returns_the_bad_item_it_removes(make_session):
    session = await make_session(2)  # the last item's payload is not UTF-8
    assert await session.pop_item() == CONVERTED[1]
    assert await session.get_items() == [GOOD, CONVERTED[0]]
    assert await session.pop_item() == CONVERTED[0]
    assert await session.pop_item() == GOOD
    assert await session.pop_item() is None
