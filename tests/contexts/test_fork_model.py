"""Model-based test of branching: a Hypothesis state machine drives random
ForkContext / AppendTurn / Compact / TruncateContext / DeleteContext /
GetContext(at_version) sequences over real gRPC and checks every answer
against a model of the branches, each a list of snapshots by version.

Checked after every step: each live branch reads as its model at the latest
version, every read at a version equals the model's snapshot of it (the
messages and the summary), and no branch holds a message appended to a
branch that is not its ancestor or appended to an ancestor after the fork
(0 cross-branch contamination). Checkpoints every few records, and now and
then every sidecar's janitor drained, so forks read sealed segments their
ancestors wrote and deletions purge and reclaim under them.

Short profile on LMDB in the default suite; the long one (LMDB, and S3 on
moto with two replicas answering at random) is marked slow.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

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

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb

#: Examples across machines (one sidecar set per test, fresh ids per example).
RUNS = itertools.count()
#: What the steps did (each test checks every kind happened).
DONE: dict[str, int] = {}


def done(kind: str) -> None:
    DONE[kind] = DONE.get(kind, 0) + 1


@dataclass
class Branch:
    """One conversation: its snapshots (version -> (texts, summary)) and
    the branches whose texts it may hold (itself and its ancestors, each up
    to the text number it was forked at)."""

    snaps: dict[int, tuple[tuple[str, ...], bytes]]
    version: int
    allowed: dict[str, int] = field(default_factory=dict)

    @property
    def latest(self) -> tuple[tuple[str, ...], bytes]:
        return self.snaps[self.version]


def texts_of(ctx: pb.Context) -> tuple[str, ...]:
    return tuple(m.user.text for m in ctx.messages if m.WhichOneof("kind") == "user")


def summary_of(ctx: pb.Context) -> bytes:
    return ctx.summary.SerializeToString(deterministic=True)


def machine_for(replicas, service_of, run):
    class ForkMachine(RuleBasedStateMachine):
        @initialize()
        def boot(self) -> None:
            self.tag = f"r{next(RUNS)}"
            self.model: dict[str, Branch] = {}
            self.n = 0
            self.names = itertools.count()

        def stub(self, pick: int):
            return replicas[pick % len(replicas)].contexts

        def _new_id(self) -> str:
            return f"{self.tag}.b{next(self.names)}"

        def _snap(self, stub, cid: str) -> tuple[int, tuple[tuple[str, ...], bytes]]:
            got = stub.GetContext(pb.GetContextRequest(context_id=cid, view=pb.CONTEXT_VIEW_FULL))
            return got.info.version, (texts_of(got.context), summary_of(got.context))

        def _record(self, cid: str, version: int, texts, summary: bytes) -> None:
            b = self.model[cid]
            assert version > b.version, (cid, version, b.version)
            b.snaps[version] = (tuple(texts), summary)
            b.version = version

        branches = property(lambda self: sorted(self.model))

        @rule(pick=st.integers(0, 1), count=st.integers(1, 3))
        def new_branch(self, pick, count) -> None:
            cid = self._new_id()
            self.model[cid] = Branch({}, 0, {cid: 1 << 62})
            self._append(cid, pick, count)

        def _append(self, cid: str, pick: int, count: int) -> None:
            texts = []
            for _ in range(count):
                self.n += 1
                texts.append(f"{cid}:{self.n} " + "words to fold " * 12)
            r = self.stub(pick).AppendTurn(
                pb.AppendTurnRequest(
                    context_id=cid,
                    messages=[pb.Message(user=pb.UserMessage(text=t)) for t in texts],
                )
            )
            texts_now, summary = self.model[cid].latest if self.model[cid].snaps else ((), b"")
            self._record(cid, r.version, texts_now + tuple(texts), summary)

        @precondition(lambda self: self.model)
        @rule(data=st.data(), pick=st.integers(0, 1), count=st.integers(1, 5))
        def append(self, data, pick, count) -> None:
            self._append(data.draw(st.sampled_from(self.branches)), pick, count)

        @precondition(lambda self: self.model)
        @rule(data=st.data(), pick=st.integers(0, 1), latest=st.booleans())
        def fork(self, data, pick, latest) -> None:
            src = self.model[data.draw(st.sampled_from(self.branches))]
            sid = next(k for k, v in self.model.items() if v is src)
            at = 0 if latest else data.draw(st.sampled_from(sorted(src.snaps)))
            version = at or src.version
            new = self._new_id()
            info = (
                self.stub(pick)
                .ForkContext(pb.ForkContextRequest(source_id=sid, at_version=at, context_id=new))
                .info
            )
            assert (info.forked_from, info.forked_at_version) == (sid, version)
            allowed = {k: min(v, self.n) for k, v in src.allowed.items()}
            allowed[new] = 1 << 62
            self.model[new] = Branch({info.version: src.snaps[version]}, info.version, allowed)
            done("fork" if latest else "fork_at")

        @precondition(lambda self: self.model)
        @rule(data=st.data(), pick=st.integers(0, 1), keep=st.integers(1, 2))
        def compact(self, data, pick, keep) -> None:
            cid = data.draw(st.sampled_from(self.branches))
            if len(self.model[cid].latest[0]) < keep + 4:
                self._append(cid, pick, 4)  # enough to fold (a fold never grows a context)
            r = self.stub(pick).Compact(pb.CompactRequest(context_id=cid, keep_last=keep))
            if r.compacted:
                texts, _ = self.model[cid].latest
                version, (now, summary) = self._snap(self.stub(pick), cid)
                assert now == texts[r.folded :], (now, texts, r.folded)
                self._record(cid, version, now, summary)
                done("compact")

        @precondition(lambda self: self.model)
        @rule(data=st.data(), pick=st.integers(0, 1), count=st.integers(1, 3))
        def truncate(self, data, pick, count) -> None:
            cid = data.draw(st.sampled_from(self.branches))
            texts, summary = self.model[cid].latest
            r = self.stub(pick).TruncateContext(
                pb.TruncateContextRequest(context_id=cid, count=count)
            )
            if r.version != self.model[cid].version:
                removed = tuple(m.user.text for m in r.removed)
                assert removed == texts[len(texts) - len(removed) :], (removed, texts)
                self._record(cid, r.version, texts[: len(texts) - len(removed)], summary)
                done("truncate")

        @precondition(lambda self: len(self.model) > 1)
        @rule(data=st.data(), pick=st.integers(0, 1))
        def delete(self, data, pick) -> None:
            cid = data.draw(st.sampled_from(self.branches))
            self.stub(pick).DeleteContext(pb.DeleteContextRequest(context_id=cid))
            del self.model[cid]
            with pytest.raises(grpc.RpcError) as err:
                self.stub(pick + 1).GetContext(pb.GetContextRequest(context_id=cid))
            assert err.value.code() == grpc.StatusCode.NOT_FOUND
            done(
                "delete_forked" if any(cid in b.allowed for b in self.model.values()) else "delete"
            )

        @precondition(lambda self: self.model)
        @rule(data=st.data(), pick=st.integers(0, 1))
        def read_at(self, data, pick) -> None:
            cid = data.draw(st.sampled_from(self.branches))
            b = self.model[cid]
            version = data.draw(st.sampled_from(sorted(b.snaps)))
            got = self.stub(pick).GetContext(
                pb.GetContextRequest(context_id=cid, view=pb.CONTEXT_VIEW_FULL, at_version=version)
            )
            assert (texts_of(got.context), summary_of(got.context)) == b.snaps[version], (
                cid,
                version,
            )
            done("read_at" if version < b.version else "read_latest")

        @rule()
        def settle(self) -> None:
            for r in replicas:
                svc = service_of(r)
                for cid in self.model:
                    run(r, svc.checkpoint_now(cid))
                run(r, svc.janitor.drain(60))

        @invariant()
        def every_branch_is_its_model_and_holds_only_its_own(self) -> None:
            for i, (cid, b) in enumerate(sorted(self.model.items())):
                version, snap = self._snap(self.stub(i), cid)
                assert (version, snap) == (b.version, b.latest), cid
                for t in snap[0]:
                    origin, _, number = t.split(" ", 1)[0].rpartition(":")
                    assert int(number) <= b.allowed.get(origin, -1), (
                        f"{cid} holds {t!r}, appended where it never branched from"
                    )

    return ForkMachine


def service_of(r):
    return r.extra["sidecar"].domain.contexts


def run(r, coro):
    return r.extra["handle"].call(coro, timeout=120)


def _run(replicas, examples: int, steps: int) -> None:
    DONE.clear()
    run_state_machine_as_test(
        machine_for(replicas, service_of, run),
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=examples < 20,
        ),
    )
    kinds = ("fork", "fork_at", "compact", "truncate", "delete_forked", "read_at")
    assert all(DONE.get(k) for k in kinds), " ".join(f"{k}={DONE.get(k, 0)}" for k in kinds)


SETTINGS = {
    "contexts__checkpoint_every": 3,
    "contexts__auto_compact": False,
    "contexts__fence_hold": 0,
}


def test_branches_match_their_model_on_lmdb(start_sidecar, store_uri_for):
    _run([start_sidecar(store_uri_for("lmdb"), **SETTINGS)], examples=10, steps=30)


@pytest.mark.slow
def test_branches_match_their_model_long_on_lmdb(start_sidecar, store_uri_for):
    _run([start_sidecar(store_uri_for("lmdb"), **SETTINGS)], examples=60, steps=50)


@pytest.mark.slow
@pytest.mark.timeout(900)  # every step reads every branch from two replicas over S3
def test_branches_match_their_model_on_s3_with_two_replicas(start_sidecar, store_uri_for):
    uri = store_uri_for("s3")
    _run([start_sidecar(uri, **SETTINGS), start_sidecar(uri, **SETTINGS)], examples=15, steps=40)
