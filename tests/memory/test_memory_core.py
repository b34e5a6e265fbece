"""The memory core on stores with any mix of capabilities (a third-party
plugin may declare none of LIST, DELETE and CONDITIONAL_PUT), and the pure
parts: strict JSON and the record format."""

from __future__ import annotations

import itertools
import json

import pytest

from ctxd_plugins.memory_store import MemoryStore
from ctxd_sidecar.config import MemoryConfig
from ctxd_sidecar.core.errors import Conflict, InvalidArgument, LimitExceeded, NotFound
from ctxd_sidecar.core.jsonvalue import nesting_depth, validate_json
from ctxd_sidecar.core.memory import Memory, StoreMemory, decode_record, encode_record
from ctxd_sidecar.core.storage import Storage
from ctxd_sidecar.plugin.store import Capability, Store
from tests.support.memory_helpers import Clock

CAPABILITIES = (Capability.LIST, Capability.DELETE, Capability.CONDITIONAL_PUT)


class DeclaredOnlyStore(Store):
    """An in-memory backend with only the declared capabilities; using an
    undeclared one raises NotImplementedError and fails the test."""

    name = "declared-only"

    def __init__(self, capabilities) -> None:
        self.inner = MemoryStore()
        self.capabilities = frozenset(capabilities)

    def get(self, key):
        return self.inner.get(key)

    def put(self, key, value, *, if_version=None, if_absent=False):
        if (if_version is not None or if_absent) and (
            Capability.CONDITIONAL_PUT not in self.capabilities
        ):
            raise NotImplementedError("conditional put not declared")
        return self.inner.put(key, value, if_version=if_version, if_absent=if_absent)

    def delete(self, key, *, if_version=None):
        if Capability.DELETE not in self.capabilities:
            raise NotImplementedError("delete not declared")
        return self.inner.delete(key, if_version=if_version)

    def list(self, prefix, *, start_after="", limit=None):
        if Capability.LIST not in self.capabilities:
            raise NotImplementedError("list not declared")
        return self.inner.list(prefix, start_after=start_after, limit=limit)


@pytest.mark.parametrize(
    "caps",
    [c for n in range(4) for c in itertools.combinations(CAPABILITIES, n)],
    ids=lambda caps: "+".join(c.value for c in caps) or "none",
)
async def test_memory_works_on_every_capability_mix(caps):
    storage = Storage(DeclaredOnlyStore(caps))
    clock = Clock()
    config = MemoryConfig(max_keys=4, sweep_interval=0)
    backend = StoreMemory(config, storage, clock=clock)
    memory = Memory(config, backend)
    await memory.start()
    try:
        first = await memory.set("a", "1", create_only=True)
        with pytest.raises(Conflict):
            await memory.set("a", "2", create_only=True)
        second = await memory.set("a", "2", expected_version=first.version)
        with pytest.raises(Conflict):
            await memory.set("a", "3", expected_version=first.version)
        await memory.set("b/1", '"x"', ttl_seconds=10)
        await memory.set("b/2", '"y"')
        await memory.set("c", "[]")
        with pytest.raises(LimitExceeded):
            await memory.set("d", "0")
        page = await memory.list("b/", limit=1)
        assert [r.key for r in page.records] == ["b/1"] and page.next_page_token
        page = await memory.list("b/", limit=1, page_token=page.next_page_token)
        assert [r.key for r in page.records] == ["b/2"] and not page.next_page_token

        clock.advance(10)
        with pytest.raises(NotFound):
            await memory.get("b/1")
        assert await backend.sweep() == 1
        await memory.set("d", "0")  # the expired key made room
        assert await memory.delete("a", expected_version=second.version)
        assert not await memory.delete("a")
        assert [r.key for r in (await memory.list()).records] == ["b/2", "c", "d"]
        assert backend.keys == 3
        # A second view of the same store counts the same records at start-up.
        again = StoreMemory(config, Storage(storage.store), clock=clock)
        await again.recount()
        assert (again.keys, again.total_bytes) == (3, len('"y"') + len("[]") + len("0"))
    finally:
        await memory.stop()
        await storage.close()


def test_validate_json_accepts_json_and_nothing_else():
    for ok in ("0", "-1.5e-3", '"\\u0000"', "[[[]]]", '{"a":{"b":[]}}', " true "):
        validate_json(ok, max_depth=3)
    for bad in ("[[[[]]]]", "NaN", "[Infinity]", "{", "", "1,", "'x'"):
        with pytest.raises(InvalidArgument) as info:
            validate_json(bad, max_depth=3)
        assert info.value.field == "value_json"


def test_validate_json_does_not_limit_digits():
    validate_json("9" * 10_000, max_depth=1)  # int("9" * 10_000) would raise in Python


def test_nesting_depth_ignores_brackets_inside_strings():
    assert nesting_depth('["[[[", {"a": "]]}"}]') == 2
    assert nesting_depth('"\\"[["') == 0
    assert nesting_depth("5") == 0


def test_records_are_json_documents_carrying_the_value_verbatim():
    value = b'{"n": 12345678901234567890123, "f": 1.10}'
    raw = encode_record(value, 1700000000000, 1700000060000, 'agent "7"')
    doc = json.loads(raw)
    assert doc["ts"] == 1700000000000 and doc["expires_at"] == 1700000060000
    assert doc["by"] == 'agent "7"' and doc["value"]["n"] == 12345678901234567890123
    rec = decode_record(raw)
    assert (rec.value, rec.ts, rec.expires_at, rec.by) == (
        value,
        1700000000000,
        1700000060000,
        'agent "7"',
    )
    assert decode_record(encode_record(b"1", 5, 0, "")).value == b"1"
    assert decode_record(b"not a record") is None
    assert decode_record(b'{"ts":"x","value":1}') is None
