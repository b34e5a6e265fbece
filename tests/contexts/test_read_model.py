"""The read model: random conversations, changed in every way a
conversation changes, read with every option a read has, through one real
sidecar (gRPC over loopback).

Writes: turns of every message kind in ctxd's own shape (protobuf and
JSON), OpenAI, Anthropic and OpenAI Responses formats; native items of
every Responses item type the SDK declares (reasoning with its
function_calls, images, hosted-tool items as notes) and a writer's own
native payloads; parallel, late and abandoned tool calls with ids reused,
foreign or unique; Compact, automatic compaction (a small window),
PlanCompaction/ApplyCompaction, TruncateContext, plan changes, delete and
re-create; turns that read in the same call (AppendTurn.read); restores
from the store (segments and the reply bytes they keep, then the log).

Reads: readers whose options are drawn from READ_OPTIONS
(tests/support/read_check.py), one value per GetContextRequest field.
After every change each reader reads (incrementally when its options say
so) and what it holds must equal a fresh read; pages joined must equal one
read; a tail must be the end of the whole; provider JSON must pass the
providers' SDK types and pairing rules; refused options must be refused
naming the field. The coverage tests fail, naming it, for any field, enum
value, message kind, write format, native format or Responses item type
without a generator here. ``-m slow`` runs the long version.
"""

from __future__ import annotations

import asyncio
import json
import uuid

import grpc
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.config.loader import load_config
from ctxd_sidecar.core.providers import NATIVE_FORMATS
from ctxd_sidecar.core.providers.ids import original
from tests.conftest import InProcessSidecar
from tests.support import read_check as rc
from tests.support.read_gen import (
    BODY_KINDS,
    LONG_TEXT,
    MESSAGE_KINDS,
    NATIVE_WRITERS,
    RESPONSES_BY_HAND,
    WRITE_FORMATS,
    Writer,
    body_strategy,
    other_items,
    sdk_item_types,
)

COUNT: dict[str, int] = {
    "examples": 0,
    "steps": 0,
    "reads": 0,
    "refusals": 0,
    "compactions": 0,
    "restarted_reads": 0,
    "past": 0,
    "restores": 0,
}
OTHER = other_items()


@pytest.fixture(scope="module")
def sidecar():
    cfg = load_config(
        env={},
        overrides={
            "store": "memory://",
            "listen": "127.0.0.1:0",
            "compaction.open_call_max_turns": 2,
            # heads (and so the copies earlier versions are read from) every few changes
            "contexts.checkpoint_every": 3,
        },
    )
    sc = InProcessSidecar(cfg)
    yield sc
    sc.close()
    print(f"\nread model: {COUNT}; known defects met: {dict(rc.SEEN)}")


# -- coverage: every option, kind and format has a generator --------------------------------
def _uncovered(what: str, enumerated, table) -> list[str]:
    return [f"{what}{x}" for x in enumerated if x not in table]


def test_every_read_option_and_value_has_a_generator():
    table = rc.READ_OPTIONS
    read_type = pb.AppendTurnRequest.DESCRIPTOR.fields_by_name["read"].message_type
    missing = _uncovered(
        "GetContextRequest.", pb.GetContextRequest.DESCRIPTOR.fields_by_name, table
    )
    missing += _uncovered("AppendTurnRequest.read.", read_type.fields_by_name, table)
    for name, enum in (("view", pb.ContextView), ("format", pb.MessageFormat)):
        missing += _uncovered(f"{name} = ", enum.keys(), [enum.Name(v) for v in table[name]])
    consistency = [pb.ReadConsistency.Name(v) for v in table["consistency"]]
    missing += _uncovered("consistency = ", pb.ReadConsistency.keys(), consistency)
    assert not missing, f"no generator in the read model for: {missing}"


def test_every_message_kind_write_format_and_native_item_has_a_generator():
    kinds = pb.Message.DESCRIPTOR.oneofs_by_name["kind"].fields
    missing = _uncovered("Message.kind.", [f.name for f in kinds], MESSAGE_KINDS)
    missing += _uncovered("write format ", pb.MessageFormat.values(), WRITE_FORMATS)
    missing += _uncovered("native format ", NATIVE_FORMATS, NATIVE_WRITERS)
    covered = set(OTHER) | set(RESPONSES_BY_HAND)
    missing += _uncovered("Responses item type ", sdk_item_types(), covered)
    assert not missing, f"no generator in the read model for: {missing}"
    # and the tables name only generators that exist
    named = {k for ks in (*MESSAGE_KINDS.values(), *NATIVE_WRITERS.values()) for k in ks}
    named |= {k for ks in RESPONSES_BY_HAND.values() for k in ks}
    assert named <= set(BODY_KINDS), named - set(BODY_KINDS)


# -- conversations ---------------------------------------------------------------------------
FORMAT_NAMES = sorted(set(WRITE_FORMATS.values()))
body = body_strategy(OTHER)
actions = st.one_of(
    st.tuples(st.just("turn"), body, st.sampled_from(FORMAT_NAMES)),
    st.tuples(st.just("turn"), body, st.sampled_from(FORMAT_NAMES)),
    st.tuples(st.just("turn"), body, st.sampled_from(FORMAT_NAMES)),
    st.tuples(st.just("turn_read"), body, st.sampled_from(FORMAT_NAMES), st.integers(0, 3)),
    st.tuples(st.just("window"), st.sampled_from([300, 600, 128_000])),
    st.tuples(st.just("compact"), st.integers(1, 4), st.booleans()),
    st.tuples(st.just("compact"), st.integers(1, 2), st.booleans()),
    st.tuples(
        st.just("plan_apply"), st.integers(1, 3), st.booleans(), st.booleans(), st.booleans()
    ),
    st.tuples(st.just("truncate"), st.integers(1, 3)),
    st.tuples(st.just("plan"), st.booleans()),
    st.tuples(st.just("delete")),
    st.tuples(st.just("restore")),
)


async def _settle(auto) -> None:
    """Until no automatic compaction runs (they run in the background)."""
    while tasks := [t for t in auto._tasks if not t.done()]:
        await asyncio.wait(tasks)


async def _invalidate(contexts, cid: str) -> None:
    contexts.invalidate(cid)


class Conversation:
    def __init__(self, sc: InProcessSidecar, specs: list[dict]) -> None:
        self.sc, self.ctx = sc, pb_stub(sc)
        self.cid = f"rm-{uuid.uuid4().hex[:10]}"
        self.writer = Writer(self.cid)
        self.readers = [rc.Reader(s) for s in specs]

    def step(self, action: tuple) -> None:
        COUNT["steps"] += 1
        getattr(self, "do_" + action[0])(*action[1:])
        self.settle()
        self._learn_ids()
        for r in self.readers:
            self.check(r)

    def settle(self) -> None:
        self.sc.call(_settle(self.sc.sidecar.domain.auto))

    # -- changes -----------------------------------------------------------------------------
    def _append(self, body: tuple, fmt: str, read: rc.Reader | None = None, **kw) -> None:
        built = self.writer.request(body, fmt)
        if built is None:
            return
        req, _, answered = built
        for k, v in kw.items():
            setattr(req, k, v)
        if read is not None:
            req.read.CopyFrom(read.request(self.cid, turn=True))
            bad = rc.refused(read.spec, turn=True)
            if bad:
                before = self._version()
                rc.check_refusal(self.ctx.AppendTurn, "read." + bad, req)
                assert self._version() == before, "a refused turn changed the context"
                COUNT["refusals"] += 1
                return
        try:
            resp = self.ctx.AppendTurn(req)
        except grpc.RpcError as exc:
            # A result for a call folded without being abandoned, truncated,
            # or whose id a later call took over: refused, nothing stored.
            assert answered, exc
            assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT, exc
            resp = None
        if answered and body[0] == "results":
            self.writer.open = [c for c in self.writer.open if c not in answered]
        if resp is not None and read is not None and resp.HasField("read"):
            read.apply(self._read_back(read, resp))

    def _read_back(self, read: rc.Reader, resp: pb.AppendTurnResponse) -> rc.Answer:
        """Every page of a turn's read. An automatic compaction the turn
        started may commit between the read-back and the next page: that
        page is ABORTED (stale token), and the read starts over, as a
        client's would."""
        try:
            return rc.read_all(self.ctx, read.request(self.cid), resp.read)
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.ABORTED, exc
            assert self._version() > resp.version, "ABORTED though nothing changed"
            COUNT["restarted_reads"] += 1
        self.settle()
        return rc.read_all(self.ctx, read.request(self.cid))

    def do_turn(self, body, fmt) -> None:
        self._append(body, fmt)

    def do_turn_read(self, body, fmt, which) -> None:
        self._append(body, fmt, read=self.readers[which % len(self.readers)])

    def do_window(self, window) -> None:
        self._append(("user", LONG_TEXT, ""), "proto", model_window=window)

    def _grow(self, grow: bool) -> None:
        """Older turns long enough that folding them saves tokens."""
        for _ in range(2 if grow else 0):
            self._append(("user", LONG_TEXT, ""), "openai")
            self._append(("text", LONG_TEXT), "anthropic")
        self.settle()  # a compaction the turns started, before this one

    def do_compact(self, keep_last, grow) -> None:
        self._grow(grow)
        try:
            self.ctx.Compact(pb.CompactRequest(context_id=self.cid, keep_last=keep_last))
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.NOT_FOUND, exc

    def do_plan_apply(self, keep_last, as_json, meanwhile, grow) -> None:
        self._grow(grow)
        try:
            p = self.ctx.PlanCompaction(
                pb.PlanCompactionRequest(context_id=self.cid, keep_last=keep_last)
            )
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.NOT_FOUND, exc
            return
        if p.nothing_to_do:
            return
        if meanwhile:  # a turn between plan and apply is kept
            self._append(("user", "meanwhile", ""), "openai")
        answer = (
            json.dumps({"goals": ["look into the logs"], "facts": ["nothing unusual"]})
            if as_json
            else "The user asked about the logs; nothing unusual was found."
        )
        req = pb.ApplyCompactionRequest(context_id=self.cid, plan_ref=p.plan_ref, answer=answer)
        try:
            self.ctx.ApplyCompaction(req)
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.ABORTED, exc

    def do_truncate(self, count) -> None:
        try:
            r = self.ctx.TruncateContext(
                pb.TruncateContextRequest(context_id=self.cid, count=count)
            )
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.NOT_FOUND, exc
            return
        w = self.writer
        for m in r.removed:
            if m.WhichOneof("kind") == "assistant":
                gone = {c.id for c in m.assistant.tool_calls}
                w.open = [c for c in w.open if c not in gone]
            elif m.WhichOneof("kind") == "tool" and m.tool.call_id not in w.open:
                w.open.append(m.tool.call_id)

    def do_plan(self, create) -> None:
        op = (
            {"create": pb.PlanCreate(goal="fix it", items=[pb.PlanItemSpec(title="look")])}
            if create
            else {"clear": pb.PlanClear()}
        )
        try:
            self.ctx.UpdatePlan(pb.UpdatePlanRequest(context_id=self.cid, **op))
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.NOT_FOUND, exc

    def do_restore(self) -> None:
        """The next read restores the conversation from the store, as a fresh
        replica would: sealed segments (with the reply bytes they keep) and
        the log after them."""
        COUNT["restores"] += 1
        self.sc.call(_invalidate(self.sc.sidecar.domain.contexts, self.cid))

    def do_delete(self) -> None:
        self.ctx.DeleteContext(pb.DeleteContextRequest(context_id=self.cid))
        self.writer.open = []

    # -- reads -------------------------------------------------------------------------------
    def _version(self) -> int:
        try:
            return self.ctx.GetContext(
                pb.GetContextRequest(context_id=self.cid, view=rc.INFO)
            ).info.version
        except grpc.RpcError:
            return 0

    def _learn_ids(self) -> None:
        """The ids an Anthropic runtime holds for the calls (mapped ones)."""
        for r in self.readers:
            if r.spec["format"] == rc.ANTHROPIC and r.spec["view"] == rc.SLICE:
                for m in r.items:
                    for b in m["content"]:
                        if b["type"] == "tool_use":
                            self.writer.anthropic_ids[original(b["id"])] = b["id"]

    def check(self, r: rc.Reader) -> None:
        """The reader catches up; held == fresh; pages join; tails end the
        whole; the request is one the provider takes."""
        spec, cid = r.spec, self.cid
        COUNT["reads"] += 1
        bad = rc.refused(spec)
        if bad:
            COUNT["refusals"] += 1
            rc.check_refusal(self.ctx.GetContext, bad, r.request(cid))
            return
        try:
            got = rc.read_all(self.ctx, r.request(cid))
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.NOT_FOUND, exc
            r.items, r.system, r.info, r.version = [], None, None, None
            return
        if not spec["since_version"]:
            got.change = pb.SLICE_CHANGE_UNSPECIFIED
        r.apply(got)
        fresh = rc.read_all(self.ctx, r.request(cid, since=False, page_size=0))
        paged = rc.read_all(self.ctx, r.request(cid, since=False, page_size=spec["page_size"] or 2))
        what = f"{spec}"
        if (r.items, r.system) != (fresh.items, fresh.system):
            # without since_version what a reader holds is its paged read
            tag = None if spec["since_version"] else rc._tail_pages(r.request(cid))
            rc.fault(tag, f"held + delta != fresh: {what}: {r.items} != {fresh.items}")
        assert r.info.version == fresh.info.version
        if spec["view"] == rc.INFO:
            assert r.info == fresh.info
        if (paged.items, paged.system) != (fresh.items, fresh.system):
            rc.fault(rc._tail_pages(r.request(cid)), f"pages join differently: {what}")
        self._check_shape(r, fresh)
        if spec["at_version"] == "past":
            self._check_past(r, fresh)

    def _check_past(self, r: rc.Reader, fresh: rc.Answer) -> None:
        """Earlier versions read now as they read then (whole and paged); a
        later one is OUT_OF_RANGE."""
        spec, cid, info = r.spec, self.cid, fresh.info
        r.past[info.incarnation, info.version] = (fresh.items, fresh.system, info)
        mine = sorted(v for g, v in r.past if g == info.incarnation and v < info.version)
        for v in {*mine[-1:], *mine[len(mine) // 3 : len(mine) // 3 + 1]}:
            items, system, then = r.past[info.incarnation, v]
            for size in (0, spec["page_size"] or 2):
                req = r.request(cid, since=False, page_size=size)
                req.at_version = v
                got = rc.read_all(self.ctx, req)
                COUNT["past"] += 1
                if (got.items, got.system) != (items, system):
                    rc.fault(rc._tail_pages(req), f"version {v} reads differently now: {spec}")
                assert (got.info.version, got.info.message_count, got.info.turns) == (
                    v,
                    then.message_count,
                    then.turns,
                ), f"version {v}: {got.info} != {then}"
        req = r.request(cid, since=False, page_size=0)
        req.at_version = info.version + 1
        try:
            self.ctx.GetContext(req)
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.OUT_OF_RANGE, exc
        else:
            raise AssertionError("a version after the latest was read")

    def _check_shape(self, r: rc.Reader, fresh: rc.Answer) -> None:
        spec, fmt, tail = r.spec, r.spec["format"], r.spec["last_n"] > 0
        if spec["view"] == rc.INFO:
            return
        if fmt in (0, rc.CTXD):
            if fmt == rc.CTXD:
                rc.check_ctxd(fresh.items)
            ids = [m.get("id") for m in fresh.items]
            blocks = [i for i in ids if i in ("summary", "plan")]
            if spec["without_summary_blocks"] or spec["view"] != rc.SLICE:
                assert not blocks, f"summary/plan blocks in {spec}"
            if tail:
                whole = rc.read_all(self.ctx, _untailed(r.request(self.cid, since=False)))
                rest = [m for m in whole.items if m.get("id") not in blocks]
                assert ids[: len(blocks)] == blocks, "the summary and plan blocks lead a tail"
                rc.check_tail(rest, fresh.items[len(blocks) :], spec["last_n"])
        elif fmt == rc.OPENAI:
            rc.check_openai(fresh.items, tail)
        elif fmt == rc.ANTHROPIC:
            rc.check_anthropic(fresh.system, fresh.items, tail)
            if spec["cache_breakpoint"]:
                req = r.request(self.cid, since=False, page_size=0)
                req.cache_breakpoint = False
                plain = rc.read_all(self.ctx, req)
                assert _unmarked(fresh.system, fresh.items) == (plain.system, plain.items)
        else:
            w = self.writer
            rc.check_responses(fresh.items, w.reasoning_of, w.follows, tail)


def pb_stub(sc: InProcessSidecar):
    return sc.running().contexts


def _untailed(req: pb.GetContextRequest) -> pb.GetContextRequest:
    req.last_n = 0
    return req


def _unmarked(system, msgs):
    def strip(blocks):
        return [{k: v for k, v in b.items() if k != "cache_control"} for b in blocks]

    return (strip(system) if system else system), [
        {**m, "content": strip(m["content"])} for m in msgs
    ]


def run(sc, steps, specs) -> None:
    COUNT["examples"] += 1
    convo = Conversation(sc, specs)
    for action in steps:
        convo.step(action)
    try:
        done = convo.ctx.GetContext(pb.GetContextRequest(context_id=convo.cid, view=rc.FULL))
        COUNT["compactions"] += len(done.context.compactions)
    except grpc.RpcError as exc:
        assert exc.code() == grpc.StatusCode.NOT_FOUND, exc
        return
    for rec in done.context.compactions:
        _check_archive(convo, rec)


def _check_archive(convo: Conversation, rec: pb.CompactionRecord) -> None:
    """Whatever the changes, each compaction's archive verifies (its hash)
    and holds exactly the span it folded."""
    req = pb.ExpandCompactionRequest(context_id=convo.cid, compaction_id=rec.id, page_size=7)
    got: list[pb.Message] = []
    while True:
        page = convo.ctx.ExpandCompaction(req)
        got.extend(page.messages)
        if not page.next_page_token:
            break
        assert len(got) <= rec.folded, f"the archive pages past its {rec.folded} messages: {rec}"
        req.page_token = page.next_page_token
    assert len(rec.folded_sha256) == 64, rec
    assert len(got) == rec.folded and got[0].id == rec.first_message_id, rec
    assert got[-1].id == rec.last_message_id, rec


readers = st.lists(rc.read_specs(), min_size=2, max_size=4)
#: No shrinking: one example costs a conversation, and shrinking one past
#: the test timeout would hide it; the example is printed as found.
SHORT = settings(
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
LONG_RUN = settings(SHORT, max_examples=200)


@SHORT
@given(steps=st.lists(actions, min_size=8, max_size=25), specs=readers)
def test_every_read_of_every_change_holds_and_is_a_valid_request(sidecar, steps, specs):
    run(sidecar, steps, specs)


@pytest.mark.slow
@LONG_RUN
@given(steps=st.lists(actions, min_size=10, max_size=60), specs=readers)
def test_every_read_of_every_change_holds_and_is_a_valid_request_long(sidecar, steps, specs):
    run(sidecar, steps, specs)


# -- defects the model found (kept as repros) ----------------------------------------
def test_a_paged_anthropic_tail_joins_into_the_one_read_request(sidecar):
    ctx, cid = pb_stub(sidecar), f"rm-{uuid.uuid4().hex[:10]}"
    for turn in ({"role": "user", "content": "hi"}, {"role": "system", "content": "Be brief."}):
        req = pb.AppendTurnRequest(context_id=cid, messages_json=json.dumps([turn]))
        req.format = pb.MESSAGE_FORMAT_OPENAI
        ctx.AppendTurn(req)
    req = pb.GetContextRequest(context_id=cid, view=rc.SLICE, format=rc.ANTHROPIC, last_n=2)
    one = rc.read_all(ctx, req)
    req.page_size = 1
    first = ctx.GetContext(req)
    paged = rc.read_all(ctx, req, first)
    assert first.system_json, "system text comes with the first page"
    assert (paged.items, paged.system) == (one.items, one.system)


def test_a_responses_tail_never_opens_with_an_output_whose_call_it_cut(sidecar):
    ctx, cid = pb_stub(sidecar), f"rm-{uuid.uuid4().hex[:10]}"
    items = [
        {"role": "user", "content": "weather?"},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
    ]
    req = pb.AppendTurnRequest(context_id=cid, messages_json=json.dumps(items))
    req.format = rc.RESPONSES
    ctx.AppendTurn(req)
    tail = rc.read_all(
        ctx, pb.GetContextRequest(context_id=cid, view=rc.SLICE, format=rc.RESPONSES, last_n=1)
    )
    assert tail.items[0].get("type") != "function_call_output", tail.items


def test_a_last_round_answered_in_part_gets_stand_ins_for_the_rest(sidecar):
    """Truncating two of three results leaves a last round a provider takes
    whole or not at all: the rest are answered by the stand-in."""
    ctx, cid = pb_stub(sidecar), f"rm-{uuid.uuid4().hex[:10]}"
    calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": "sh", "arguments": "{}"}}
        for i in range(3)
    ]
    items = [{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": calls}]
    items += [{"role": "tool", "tool_call_id": f"c{i}", "content": f"r{i}"} for i in range(3)]
    req = pb.AppendTurnRequest(context_id=cid, messages_json=json.dumps(items))
    req.format = rc.OPENAI
    ctx.AppendTurn(req)
    ctx.TruncateContext(pb.TruncateContextRequest(context_id=cid, count=2))
    read = pb.GetContextRequest(context_id=cid, view=rc.SLICE, format=rc.OPENAI)
    rc.check_openai(rc.read_all(ctx, read).items, False)
    read.format = rc.ANTHROPIC
    got = rc.read_all(ctx, read)
    rc.check_anthropic(got.system, got.items, False)
    assert [b["tool_use_id"] for b in got.items[-1]["content"]] == ["c0", "c1", "c2"]
