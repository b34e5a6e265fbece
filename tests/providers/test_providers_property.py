"""Property: a runtime that holds the slice in a provider's shape and applies
what incremental reads answer always holds exactly what a fresh read
returns, and that is a request the provider accepts.

Random conversations go through one real sidecar (gRPC over loopback):
parallel tool calls, results pending, late or never sent (abandoned after
2 user turns), ids reused every round (``call0``) or from other providers
(``functions.Bash:0``, ``call|2``), compactions, deletes and re-creates.
Two runtimes (OpenAI and Anthropic shape) follow along, one of them through
``AppendTurn(read=...)``. After every step each runtime's held request
plus the delta must equal a fresh read, pages joined must equal one read,
and the fresh read must pass the SDK types and the providers' structural
rules (OpenAI: every tool message right after its call, once; Anthropic:
first message user, roles alternating, each tool_result right after its
tool_use turn; ids valid and unique in the request).

The default run is short; ``-m slow`` runs the long one.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.config.loader import load_config
from ctxd_sidecar.core.providers.ids import original
from tests.conftest import InProcessSidecar
from tests.providers.test_providers import check_anthropic, check_openai

FORMATS = {"openai": pb.MESSAGE_FORMAT_OPENAI, "anthropic": pb.MESSAGE_FORMAT_ANTHROPIC}
ANTHROPIC_ID = re.compile(r"[A-Za-z0-9_-]+")
COUNT = {"examples": 0, "steps": 0, "appends": 0, "replaces": 0, "compactions": 0}


@pytest.fixture(scope="module")
def sidecar():
    cfg = load_config(
        env={},
        overrides={
            "store": "memory://",
            "listen": "127.0.0.1:0",
            "contexts.auto_compact": False,
            "compaction.open_call_max_turns": 2,
        },
    )
    sc = InProcessSidecar(cfg)
    yield sc.running().contexts
    sc.close()
    print(f"\nproperty run: {COUNT}")


# -- what the runtime holds -----------------------------------------------------------------
@dataclass
class Runtime:
    fmt: str
    #: Sends RenderPrompt's prompt: reads without the summary and plan blocks.
    bare: bool = False
    messages: list = field(default_factory=list)
    system: list | None = None
    version: int | None = None
    incarnation: str = ""


def _blocks(content):
    return content if isinstance(content, list) else [{"type": "text", "text": content}]


def join(fmt: str, held: list, page: list) -> None:
    """As the clients join pages: an Anthropic user message continued across
    a page boundary is merged."""
    if fmt == "anthropic" and held and page and held[-1]["role"] == page[0]["role"] == "user":
        held[-1] = {**held[-1], "content": _blocks(held[-1]["content"]) + page[0]["content"]}
        page = page[1:]
    held.extend(page)


def read_all(ctx, req: pb.GetContextRequest, first=None):
    """All pages of one read: (first page, messages joined, system)."""
    pages = [first or ctx.GetContext(req)]
    while pages[-1].next_page_token:
        nxt = pb.GetContextRequest()
        nxt.CopyFrom(req)
        nxt.ClearField("since_version")
        nxt.since_incarnation = ""
        nxt.page_token = pages[-1].next_page_token
        pages.append(ctx.GetContext(nxt))
    messages: list = []
    system = None
    for i, p in enumerate(pages):
        join(req_fmt(req), messages, json.loads(p.messages_json or "[]"))
        if p.system_json:
            assert i == 0, "system text comes with the first page only"
            system = json.loads(p.system_json)
    return pages[0], messages, system


def req_fmt(req) -> str:
    return next(k for k, v in FORMATS.items() if v == req.format)


def slice_req(cid: str, fmt: str, page_size: int = 0, rt: Runtime | None = None, bare=False):
    req = pb.GetContextRequest(
        context_id=cid,
        view=pb.CONTEXT_VIEW_SLICE,
        format=FORMATS[fmt],
        page_size=page_size,
        without_summary_blocks=bare or (rt is not None and rt.bare),
    )
    if rt is not None and rt.version is not None:
        req.since_version = rt.version
        req.since_incarnation = rt.incarnation
    return req


def apply_delta(rt: Runtime, first, messages, system) -> None:
    if first.change == pb.SLICE_CHANGE_APPEND:
        COUNT["appends"] += 1
        assert system is None, "an append carries no system text"
        if rt.fmt == "anthropic" and rt.messages and messages:
            assert rt.messages[-1]["role"] != messages[0]["role"], "append of whole messages"
        rt.messages.extend(messages)
    elif first.change == pb.SLICE_CHANGE_REPLACE or first.change == pb.SLICE_CHANGE_UNSPECIFIED:
        COUNT["replaces"] += 1
        rt.messages, rt.system = messages, system
    else:
        assert first.change == pb.SLICE_CHANGE_NONE and not messages
    rt.version, rt.incarnation = first.info.version, first.info.incarnation


def ids_valid(fmt: str, messages: list) -> None:
    if fmt == "openai":
        calls = [c["id"] for m in messages for c in m.get("tool_calls") or ()]
        results = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    else:
        blocks = [b for m in messages for b in m["content"]]
        calls = [b["id"] for b in blocks if b["type"] == "tool_use"]
        results = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
        assert all(ANTHROPIC_ID.fullmatch(c) for c in calls), calls
    assert len(set(calls)) == len(calls), f"call ids repeat in one request: {calls}"
    assert len(set(results)) == len(results), f"a call is answered twice: {results}"
    assert set(results) <= set(calls), "a result answers no call of the request"


def check(ctx, cid: str, runtimes: list[Runtime], page_size: int) -> None:
    """Each runtime catches up; held == fresh; pages join; fresh is valid."""
    for rt in runtimes:
        try:
            first, messages, system = read_all(ctx, slice_req(cid, rt.fmt, page_size, rt))
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.NOT_FOUND, exc
            rt.messages, rt.system, rt.version = [], None, None
            continue
        apply_delta(rt, first, messages, system)
        _, fresh, fresh_system = read_all(ctx, slice_req(cid, rt.fmt, bare=rt.bare))
        _, paged, paged_system = read_all(ctx, slice_req(cid, rt.fmt, 2, bare=rt.bare))
        assert rt.messages == fresh, f"{rt.fmt}: held slice + delta differs from a fresh read"
        assert rt.system == fresh_system
        assert (paged, paged_system) == (fresh, fresh_system), f"{rt.fmt}: pages join differently"
        if rt.fmt == "openai":
            check_openai(fresh)
        else:
            check_anthropic(fresh_system or [], fresh)
        ids_valid(rt.fmt, fresh)


# -- conversations ---------------------------------------------------------------------------
#: Long enough that compactions save more than their summary takes.
LONG_TEXT = "Here is what I found. " + "The logs say nothing unusual, " * 12
ID_STYLES = {
    "reused": lambda i, r: f"call{i}",
    "foreign": lambda i, r: f"functions.Bash:{i}" if r % 2 else f"call|{i}",
    "unique": lambda i, r: f"toolu_{r}_{i}",
}
actions = st.one_of(
    st.tuples(st.just("user"), st.sampled_from(["hi", "and then?", " ", "q?", LONG_TEXT])),
    st.tuples(st.just("text"), st.sampled_from(["ok", "", "done.", LONG_TEXT, LONG_TEXT])),
    st.tuples(st.just("calls"), st.integers(1, 3), st.sampled_from(sorted(ID_STYLES))),
    st.tuples(st.just("results"), st.integers(0, 7), st.booleans()),
    st.tuples(st.just("compact"), st.integers(1, 4)),
    st.tuples(st.just("compact"), st.integers(1, 2)),
    st.tuples(st.just("delete"), st.just(0)),
    st.tuples(st.just("turn_read"), st.sampled_from(["hi", "go on"])),
)


def _user(text):
    return {"role": "user", "content": text}


def anthropic_results(rt: Runtime, chosen: list[str]) -> list[dict]:
    """Results for ``chosen`` (ids as sent) with the ids the Anthropic runtime
    holds for their latest calls (mapped ones where ctxd mapped them)."""
    held = {}
    for m in rt.messages:
        for b in m["content"]:
            if b["type"] == "tool_use":
                held[original(b["id"])] = b["id"]
    blocks = [
        {"type": "tool_result", "tool_use_id": held.get(c, c), "content": f"r {c}"} for c in chosen
    ]
    return [{"role": "user", "content": blocks}]


def run_conversation(ctx, steps, page_size: int) -> None:
    COUNT["examples"] += 1
    cid = f"p-{uuid.uuid4().hex[:10]}"
    rts = [Runtime("openai"), Runtime("anthropic"), Runtime("anthropic", bare=True)]
    open_calls: list[str] = []  # ids whose latest call has no result, oldest first
    rnd = 0
    for step in steps:
        COUNT["steps"] += 1
        kind = step[0]
        turn = None
        if kind == "user":
            turn = [_user(step[1])]
        elif kind == "text":
            turn = [{"role": "assistant", "content": step[1] or "…"}]
        elif kind == "calls":
            rnd += 1
            ids = [ID_STYLES[step[2]](i, rnd) for i in range(step[1])]
            calls = [
                {"id": c, "type": "function", "function": {"name": "sh", "arguments": '{"n":1}'}}
                for c in ids
            ]
            turn = [{"role": "assistant", "content": None, "tool_calls": calls}]
            open_calls = [c for c in open_calls if c not in ids] + ids
        elif kind == "results":
            chosen = [c for i, c in enumerate(open_calls) if step[1] >> (i % 3) & 1]
            if not chosen:
                continue
            turn = [{"role": "tool", "tool_call_id": c, "content": f"r {c}"} for c in chosen]
            if step[2]:  # as the Anthropic runtime answers: with the ids it read
                turn = anthropic_results(rts[1], chosen)
        elif kind == "compact":
            try:
                r = ctx.Compact(pb.CompactRequest(context_id=cid, keep_last=step[1]))
                COUNT["compactions"] += r.compacted
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.NOT_FOUND, exc
        elif kind == "delete":
            ctx.DeleteContext(pb.DeleteContextRequest(context_id=cid))
            open_calls = []
        if kind == "turn_read":
            rt = rts[rnd % 2]
            req = pb.AppendTurnRequest(
                context_id=cid,
                messages_json=json.dumps([_user(step[1])]),
                format=pb.MESSAGE_FORMAT_OPENAI,
            )
            read = slice_req(cid, rt.fmt, page_size, rt)
            req.read.CopyFrom(read)
            resp = ctx.AppendTurn(req)
            if resp.HasField("read"):
                apply_delta(rt, *read_all(ctx, read, first=resp.read))
        elif turn is not None:
            fmt = pb.MESSAGE_FORMAT_OPENAI
            if turn[0]["role"] == "user" and isinstance(turn[0]["content"], list):
                fmt = pb.MESSAGE_FORMAT_ANTHROPIC
            req = pb.AppendTurnRequest(context_id=cid, messages_json=json.dumps(turn), format=fmt)
            try:
                ctx.AppendTurn(req)
            except grpc.RpcError as exc:
                # A result for a call folded without being abandoned, or whose
                # id a later call took over: refused, nothing stored.
                assert kind == "results", exc
                assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT, exc
            if kind == "results":
                open_calls = [c for c in open_calls if c not in chosen]
        check(ctx, cid, rts, page_size)


SHORT = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LONG_RUN = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SHORT
@given(steps=st.lists(actions, min_size=8, max_size=25), page_size=st.sampled_from([0, 1, 3]))
def test_held_slice_plus_delta_is_a_fresh_valid_request(sidecar, steps, page_size):
    run_conversation(sidecar, steps, page_size)


@pytest.mark.slow
@LONG_RUN
@given(steps=st.lists(actions, min_size=5, max_size=60), page_size=st.sampled_from([0, 1, 3]))
def test_held_slice_plus_delta_is_a_fresh_valid_request_long(sidecar, steps, page_size):
    run_conversation(sidecar, steps, page_size)
