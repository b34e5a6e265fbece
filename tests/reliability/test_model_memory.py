"""Model-based test of MemoryService: a Hypothesis state machine drives
Set/Get/Delete/List, compare-and-set, TTL (with a clock the test moves) and
restarts over real gRPC, on LMDB and on S3 without listing (the key index),
and checks every answer against a plain dict."""

from __future__ import annotations

import json
from dataclasses import dataclass

import grpc
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from ctxd_sidecar.api.ctxd.v1 import memory_pb2 as pb
from tests.support.memory_helpers import Clock, list_all, memory_core, stop

KEYS = ["a", "a/x", "a/y", "a/y/z", "b", "b.c", "bz"]
PREFIXES = ["", "a", "a/", "a/y", "b", "zz"]
TTLS = [0, 0, 1, 2, 10]
STEPS = [0.5, 1.0, 1.5, 5.0, 3600.0]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
).map(lambda v: json.dumps(v, ensure_ascii=False))

#: Examples run over all machines (reported by the test module).
EXAMPLES = {"memory": 0}


@dataclass
class Rec:
    value: str
    version: str
    expires_at_ms: int
    by: str


def code_of(call) -> grpc.StatusCode:
    try:
        call()
    except grpc.RpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def machine_for(start_sidecar, store_uri_for, backend: str):
    class MemoryMachine(RuleBasedStateMachine):
        """The dict ``model`` is what memory should hold; ``seen`` keeps every
        version ever returned (stale ones drive CAS failures)."""

        @initialize()
        def boot(self) -> None:
            EXAMPLES["memory"] += 1
            self.uri = store_uri_for(backend)
            self.clock = Clock()
            self.model: dict[str, Rec] = {}
            self.seen: list[str] = ["v-none"]
            self.running = None
            self._start()

        def _start(self) -> None:
            self.running = start_sidecar(self.uri, memory__sweep_interval=0)
            memory_core(self.running).clock = self.clock

        @property
        def stub(self):
            return self.running.memory

        def now_ms(self) -> int:
            return int(self.clock() * 1000)

        def live(self, key: str) -> Rec | None:
            rec = self.model.get(key)
            if rec is None or (rec.expires_at_ms and rec.expires_at_ms <= self.now_ms()):
                return None
            return rec

        # -- writes ------------------------------------------------------------------
        @rule(
            key=st.sampled_from(KEYS),
            value=json_values,
            ttl=st.sampled_from(TTLS),
            by=st.sampled_from(["", "agent-1"]),
            mode=st.sampled_from(["plain", "plain", "cas-current", "cas-stale", "create-only"]),
            stale=st.integers(0, 1000),
        )
        def set(self, key, value, ttl, by, mode, stale) -> None:
            current = self.live(key)
            req = pb.SetRequest(key=key, value_json=value, ttl_seconds=ttl, by=by)
            if mode == "cas-current":
                req.expected_version = (
                    current.version if current else self.seen[stale % len(self.seen)]
                )
            elif mode == "cas-stale":
                req.expected_version = self.seen[stale % len(self.seen)]
            elif mode == "create-only":
                req.create_only = True
            should = True
            if req.expected_version:
                should = current is not None and current.version == req.expected_version
            elif req.create_only:
                should = current is None
            try:
                resp = self.stub.Set(req, timeout=30)
            except grpc.RpcError as exc:
                assert not should, f"Set refused: {exc.code()} {exc.details()}"
                assert exc.code() == grpc.StatusCode.ABORTED, exc.details()
                return
            assert should, f"Set {mode} should have been ABORTED"
            r = resp.record
            assert (r.key, r.value_json, r.by) == (key, value, by)
            expires = self.now_ms() + ttl * 1000 if ttl else 0
            assert r.version
            same = (value, by, expires)
            if current is not None and (current.value, current.by, current.expires_at_ms) != same:
                # Identical bytes (same value, author, expiry and millisecond)
                # may keep their version; a different record never does.
                assert r.version != current.version
            assert r.expires_at_ms == expires
            self.model[key] = Rec(value, r.version, expires, by)
            self.seen.append(r.version)

        @rule(
            key=st.sampled_from(KEYS),
            mode=st.sampled_from(["plain", "cas-current", "cas-stale"]),
            stale=st.integers(0, 1000),
        )
        def delete(self, key, mode, stale) -> None:
            current = self.live(key)
            req = pb.DeleteRequest(key=key)
            if mode == "cas-current" and current is not None:
                req.expected_version = current.version
            elif mode == "cas-stale":
                req.expected_version = self.seen[stale % len(self.seen)]
            should = not req.expected_version or (
                current is not None and current.version == req.expected_version
            )
            try:
                resp = self.stub.Delete(req, timeout=30)
            except grpc.RpcError as exc:
                assert not should, f"Delete refused: {exc.code()} {exc.details()}"
                assert exc.code() == grpc.StatusCode.ABORTED, exc.details()
                return
            assert should, "Delete with a stale version should have been ABORTED"
            assert resp.deleted == (current is not None)
            self.model.pop(key, None)

        # -- time and restarts --------------------------------------------------------
        @rule(seconds=st.sampled_from(STEPS))
        def advance(self, seconds) -> None:
            self.clock.advance(seconds)

        @precondition(lambda self: self.running is not None)
        @rule()
        def restart(self) -> None:
            stop(self.running)
            self._start()

        # -- reads ----------------------------------------------------------------------
        @rule(key=st.sampled_from(KEYS))
        def get(self, key) -> None:
            expected = self.live(key)
            try:
                r = self.stub.Get(pb.GetRequest(key=key), timeout=30).record
            except grpc.RpcError as exc:
                assert expected is None, f"Get {key}: {exc.code()} {exc.details()}"
                assert exc.code() == grpc.StatusCode.NOT_FOUND
                return
            assert expected is not None, f"Get {key} returned a record the model does not hold"
            assert (r.value_json, r.version, r.expires_at_ms, r.by) == (
                expected.value,
                expected.version,
                expected.expires_at_ms,
                expected.by,
            )

        @rule(
            prefix=st.sampled_from(PREFIXES),
            limit=st.sampled_from([0, 1, 2, 5]),
            values=st.booleans(),
        )
        def list(self, prefix, limit, values) -> None:
            got = list_all(self.stub, prefix=prefix, limit=limit, include_values=values)
            want = sorted(k for k in self.model if k.startswith(prefix) and self.live(k))
            assert [r.key for r in got] == want
            for r in got:
                rec = self.model[r.key]
                assert r.version == rec.version
                assert r.value_json == (rec.value if values else "")

        @invariant()
        def every_live_key_reads_back(self) -> None:
            # Cheap spot check on one key per step keeps the run short.
            if self.running is None or not self.model:
                return
            key = min(self.model)
            rec = self.live(key)
            code = code_of(lambda: self.stub.Get(pb.GetRequest(key=key), timeout=30))
            assert code == (grpc.StatusCode.OK if rec else grpc.StatusCode.NOT_FOUND)

        def teardown(self) -> None:
            if getattr(self, "running", None) is not None:
                stop(self.running)

    return MemoryMachine


def run(start_sidecar, store_uri_for, backend, examples, steps) -> None:
    before = EXAMPLES["memory"]
    run_state_machine_as_test(
        machine_for(start_sidecar, store_uri_for, backend),
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
    print(f"\nmemory model on {backend}: {EXAMPLES['memory'] - before} examples")


# The short profile runs on LMDB in the default set and, since S3 round trips
# make it minutes long, on S3 without LIST in the slow set.
@pytest.mark.parametrize("backend", ["lmdb", pytest.param("s3-nolist", marks=pytest.mark.slow)])
def test_memory_matches_a_dict(start_sidecar, store_uri_for, backend):
    run(start_sidecar, store_uri_for, backend, examples=15, steps=20)


@pytest.mark.slow
# S3 round trips make the long profile minutes long there; the short one covers S3.
@pytest.mark.parametrize("backend", ["lmdb"])
def test_memory_matches_a_dict_longer(start_sidecar, store_uri_for, backend):
    run(start_sidecar, store_uri_for, backend, examples=40, steps=40)
