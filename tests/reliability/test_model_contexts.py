"""Model-based test of ContextService: a Hypothesis state machine drives
AppendTurn (with idempotency keys and expected versions), GetContext,
ListContexts, DeleteContext and restarts over real gRPC, on LMDB and on S3
without listing, and checks every answer against a plain model."""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule, run_state_machine_as_test

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from tests.support.memory_helpers import stop

IDS = ["root", "c1", "c2", "conv.3"]
KEYS = ["", "", "k1", "k2", "k3"]

#: Examples run over all machines (reported by the test module).
EXAMPLES = {"contexts": 0}


@dataclass
class Ctx:
    texts: list[str] = field(default_factory=list)
    version: int = 0
    turns: int = 0
    #: idempotency key -> (version, message ids) of its first answer
    keys: dict[str, tuple[int, list[str]]] = field(default_factory=dict)


def machine_for(start_sidecar, store_uri_for, backend: str, checkpoint_every: int):
    class ContextMachine(RuleBasedStateMachine):
        @initialize()
        def boot(self) -> None:
            EXAMPLES["contexts"] += 1
            self.uri = store_uri_for(backend)
            self.model: dict[str, Ctx] = {"root": Ctx()}
            self.n = 0
            self.running = None
            self._start()

        def _start(self) -> None:
            self.running = start_sidecar(
                self.uri,
                contexts__checkpoint_every=checkpoint_every,
                contexts__auto_compact=False,
            )

        @property
        def stub(self):
            return self.running.contexts

        @rule(
            cid=st.sampled_from(IDS),
            count=st.integers(1, 3),
            key=st.sampled_from(KEYS),
            expect=st.sampled_from(["none", "none", "current", "stale"]),
        )
        def append(self, cid, count, key, expect) -> None:
            ctx = self.model.get(cid)
            texts = []
            for _ in range(count):
                self.n += 1
                texts.append(f"t{self.n}")
            req = pb.AppendTurnRequest(
                context_id=cid,
                messages=[pb.Message(user=pb.UserMessage(text=t)) for t in texts],
                idempotency_key=key,
            )
            base = ctx.version if ctx else 0
            if expect == "current":
                req.expected_version = base
            elif expect == "stale":
                req.expected_version = base + 1
            replay = ctx is not None and key and key in ctx.keys
            try:
                resp = self.stub.AppendTurn(req, timeout=30)
            except grpc.RpcError as exc:
                assert expect == "stale" and not replay, f"{exc.code()} {exc.details()}"
                assert exc.code() == grpc.StatusCode.ABORTED
                return
            if replay:
                assert resp.replayed
                assert (resp.version, list(resp.message_ids)) == ctx.keys[key]
                return
            assert expect != "stale", "a stale expected_version was accepted"
            assert not resp.replayed
            if ctx is None:
                ctx = self.model[cid] = Ctx()
            first = len(ctx.texts) + 1
            ids = [f"m{first + i}" for i in range(count)]
            ctx.texts += texts
            ctx.version += 1
            ctx.turns += 1
            assert resp.version == ctx.version
            assert list(resp.message_ids) == ids
            if key:
                ctx.keys[key] = (ctx.version, ids)

        @rule(cid=st.sampled_from(IDS), view=st.sampled_from([0, 1, 2, 3]))
        def get(self, cid, view) -> None:
            ctx = self.model.get(cid)
            try:
                resp = self.stub.GetContext(
                    pb.GetContextRequest(context_id=cid, view=view), timeout=30
                )
            except grpc.RpcError as exc:
                assert ctx is None, f"{exc.code()} {exc.details()}"
                assert exc.code() == grpc.StatusCode.NOT_FOUND
                return
            assert ctx is not None, f"{cid} exists on the server but not in the model"
            assert (resp.info.version, resp.info.turns, resp.info.message_count) == (
                ctx.version,
                ctx.turns,
                len(ctx.texts),
            )
            if view in (0, 1):
                got = resp.context
                assert [m.user.text for m in got.messages] == ctx.texts
                assert [m.id for m in got.messages] == [f"m{i + 1}" for i in range(len(ctx.texts))]
                assert got.version == ctx.version
            elif view == 3:
                assert [m.user.text for m in resp.slice] == ctx.texts

        @rule(page_size=st.sampled_from([0, 1, 2]))
        def list(self, page_size) -> None:
            seen, token = [], ""
            while True:
                resp = self.stub.ListContexts(
                    pb.ListContextsRequest(page_size=page_size, page_token=token), timeout=30
                )
                seen += [(i.id, i.version) for i in resp.contexts]
                token = resp.next_page_token
                if not token:
                    break
            assert seen == sorted((k, c.version) for k, c in self.model.items())

        @rule(cid=st.sampled_from(IDS), expect=st.sampled_from(["none", "current", "stale"]))
        def delete(self, cid, expect) -> None:
            ctx = self.model.get(cid)
            req = pb.DeleteContextRequest(context_id=cid)
            if expect == "current":
                req.expected_version = ctx.version if ctx else 0
            elif expect == "stale":
                req.expected_version = (ctx.version if ctx else 0) + 1
            try:
                resp = self.stub.DeleteContext(req, timeout=30)
            except grpc.RpcError as exc:
                if cid == "root":
                    assert exc.code() == grpc.StatusCode.FAILED_PRECONDITION
                    return
                assert exc.code() == grpc.StatusCode.ABORTED, exc.details()
                assert ctx is not None and expect == "stale"
                return
            assert cid != "root", "root was deleted"
            # Deleting a missing context answers deleted=false whatever the
            # expected_version (a retried delete stays harmless).
            assert ctx is None or expect != "stale", "a stale expected_version was accepted"
            assert resp.deleted == (ctx is not None)
            self.model.pop(cid, None)

        @rule()
        def restart(self) -> None:
            stop(self.running)
            self._start()

        def teardown(self) -> None:
            if getattr(self, "running", None) is not None:
                stop(self.running)

    return ContextMachine


def run(start_sidecar, store_uri_for, backend, examples, steps, checkpoint_every=3) -> None:
    before = EXAMPLES["contexts"]
    run_state_machine_as_test(
        machine_for(start_sidecar, store_uri_for, backend, checkpoint_every),
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
    print(f"\ncontexts model on {backend}: {EXAMPLES['contexts'] - before} examples")


# The short profile runs on LMDB in the default set and, since S3 round trips
# make it minutes long, on S3 without LIST in the slow set.
@pytest.mark.parametrize("backend", ["lmdb", pytest.param("s3-nolist", marks=pytest.mark.slow)])
def test_contexts_match_a_model(start_sidecar, store_uri_for, backend):
    run(start_sidecar, store_uri_for, backend, examples=15, steps=20)


@pytest.mark.slow
# S3 round trips make the long profile minutes long there; the short one covers S3.
@pytest.mark.parametrize("backend", ["lmdb"])
def test_contexts_match_a_model_longer(start_sidecar, store_uri_for, backend):
    run(start_sidecar, store_uri_for, backend, examples=40, steps=40, checkpoint_every=2)
