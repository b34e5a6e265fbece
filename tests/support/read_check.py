"""Reads for the read model (tests/contexts/test_read_model.py): every
option of GetContextRequest drawn from one table, a reader that holds what
it read and applies incremental answers, and the providers' rules a
produced request must keep.

:data:`READ_OPTIONS` is the table the coverage test compares with the
request's descriptor: each field name maps to the values drawn for it.
Checks that meet a defect named in :data:`KNOWN` count it instead of
failing (see :func:`fault`).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field

import grpc
from anthropic.types import MessageParam, TextBlockParam
from google.protobuf import json_format
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionMessageParam
from openai.types.responses import ResponseInputItemParam
from pydantic import TypeAdapter

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.core.providers import NATIVE_FORMAT
from tests.providers.test_providers import sdk_valid
from tests.support.contexts import bad_field

#: Defects the suite knows and tolerates while their fix is on its way: a
#: check that meets one counts it in SEEN and goes on. Empty when nothing is
#: pending; a tag stays here only with a repro test that fails on it.
KNOWN: set[str] = set()
SEEN: Counter = Counter()

SLICE, FULL, INFO = pb.CONTEXT_VIEW_SLICE, pb.CONTEXT_VIEW_FULL, pb.CONTEXT_VIEW_INFO
OPENAI, ANTHROPIC = pb.MESSAGE_FORMAT_OPENAI, pb.MESSAGE_FORMAT_ANTHROPIC
RESPONSES, CTXD = pb.MESSAGE_FORMAT_OPENAI_RESPONSES, pb.MESSAGE_FORMAT_CTXD
_VALUES = pb.ContextView.values, pb.MessageFormat.values, pb.ReadConsistency.values

#: GetContextRequest field -> what the read model draws for it. context_id:
#: the conversation's (True) or, on a turn's read, left empty (False);
#: page_token: followed on every read until the last page; since_version:
#: read incrementally (the version held); since_incarnation: sent with it;
#: at_version: "past" reads earlier versions too (see Reader.past).
READ_OPTIONS: dict[str, tuple] = {
    "context_id": (True, False),
    "view": (SLICE, SLICE, pb.CONTEXT_VIEW_UNSPECIFIED, FULL, INFO),
    "consistency": tuple(pb.ReadConsistency.values()),
    "page_size": (0, 1, 2, 3),
    "page_token": ("followed",),
    "since_version": (True, True, False),
    "format": tuple(pb.MessageFormat.values()),
    "cache_breakpoint": (False, True),
    "since_incarnation": (True, True, False),
    "last_n": (0, 0, 1, 3),
    "without_summary_blocks": (False, True),
    "at_version": (0, 0, "past"),
}
OPENAI_MESSAGES = TypeAdapter(list[ChatCompletionMessageParam])
ANTHROPIC_MESSAGES = TypeAdapter(list[MessageParam])
ANTHROPIC_SYSTEM = TypeAdapter(list[TextBlockParam])
RESPONSES_INPUT = TypeAdapter(list[ResponseInputItemParam])
ANTHROPIC_ID = re.compile(r"[A-Za-z0-9_-]+")


@st.composite
def read_specs(draw) -> dict:
    """One reader's options, each drawn from READ_OPTIONS; combinations the
    sidecar refuses come rarely (each reader checks the refusal)."""
    spec = {name: draw(st.sampled_from(values)) for name, values in READ_OPTIONS.items()}
    if spec["view"] != SLICE and draw(st.integers(0, 9)):
        spec["format"] = pb.MESSAGE_FORMAT_UNSPECIFIED
    if spec["since_version"] and spec["last_n"] and draw(st.integers(0, 9)):
        spec["last_n"] = 0
    if spec["since_incarnation"] and not spec["since_version"] and draw(st.integers(0, 9)):
        spec["since_incarnation"] = False
    if spec["at_version"] and spec["since_version"] and draw(st.integers(0, 9)):
        spec["since_version"] = spec["since_incarnation"] = False
    return spec


def refused(spec: dict, turn: bool = False) -> str | None:
    """The field the sidecar names when it refuses these options (``turn``:
    on AppendTurnRequest.read, which reads the version the turn made)."""
    # in the order the sidecar checks them
    if spec["since_incarnation"] and not spec["since_version"]:
        return "since_incarnation"
    if spec["format"] and spec["view"] != SLICE:
        return "format"
    if spec["last_n"] and spec["since_version"]:
        return "last_n"
    if spec["at_version"] and (spec["since_version"] or turn):
        return "at_version"
    return None


def fault(tag: str | None, message: str) -> None:
    """Fail, unless ``tag`` names a known defect (then count it)."""
    if tag in KNOWN:
        SEEN[tag] += 1
        return
    raise AssertionError(f"[{tag or 'defect'}] {message}")


# -- reading ---------------------------------------------------------------------------------
@dataclass
class Answer:
    change: int
    info: pb.ContextInfo
    items: list
    system: list | None


@dataclass
class Reader:
    spec: dict
    items: list = field(default_factory=list)
    system: list | None = None
    info: pb.ContextInfo | None = None
    version: int | None = None
    incarnation: str = ""
    #: at_version "past": (incarnation, version) -> the fresh read then (items, system).
    past: dict = field(default_factory=dict)

    def request(self, cid: str, *, since=True, page_size=None, turn=False) -> pb.GetContextRequest:
        s = self.spec
        req = pb.GetContextRequest(
            context_id=cid if s["context_id"] or not turn else "",
            view=s["view"],
            consistency=s["consistency"],
            page_size=s["page_size"] if page_size is None else page_size,
            format=s["format"],
            cache_breakpoint=s["cache_breakpoint"],
            last_n=s["last_n"],
            without_summary_blocks=s["without_summary_blocks"],
        )
        if s["since_version"] and (since and self.version is not None or refused(s)):
            req.since_version = self.version or 0
            if s["since_incarnation"]:
                req.since_incarnation = self.incarnation
        elif s["since_incarnation"] and not s["since_version"]:
            req.since_incarnation = "gen0"  # refused: it goes with since_version
        if refused(s, turn) == "at_version":
            req.at_version = 1
        return req

    def apply(self, a: Answer) -> None:
        if a.change == pb.SLICE_CHANGE_APPEND:
            assert a.system is None, "an append carries no system text"
            self.items = self.items + a.items
        elif a.change == pb.SLICE_CHANGE_NONE:
            assert not a.items, "NONE with messages"
        else:
            self.items, self.system = a.items, a.system
        self.info = a.info
        self.version, self.incarnation = a.info.version, a.info.incarnation


def _page_items(req: pb.GetContextRequest, resp: pb.GetContextResponse) -> list:
    if req.view == INFO:
        return []
    if req.format:
        return json.loads(resp.messages_json or "[]")
    got = resp.slice if req.view == SLICE else resp.context.messages
    return [json_format.MessageToDict(m) for m in got]


def join(fmt: int, held: list, page: list) -> list:
    """As the clients join pages: an Anthropic user message continued
    across a page boundary is merged."""
    if fmt == ANTHROPIC and held and page and held[-1]["role"] == page[0]["role"] == "user":
        merged = {**held[-1], "content": held[-1]["content"] + page[0]["content"]}
        return held[:-1] + [merged] + page[1:]
    return held + page


def read_all(ctx, req: pb.GetContextRequest, first=None) -> Answer:
    """Every page of one read, joined."""
    pages = [first if first is not None else ctx.GetContext(req)]
    seen: set[str] = set()
    while pages[-1].next_page_token:
        # A token met twice would page forever (and fill memory): fail on it.
        token = pages[-1].next_page_token
        assert token not in seen, f"page {len(pages)} repeats a page token; request: {req}"
        seen.add(token)
        nxt = pb.GetContextRequest()
        nxt.CopyFrom(req)
        nxt.ClearField("since_version")
        nxt.since_incarnation = ""
        nxt.page_token = pages[-1].next_page_token
        pages.append(ctx.GetContext(nxt))
    items: list = []
    system = None
    for i, p in enumerate(pages):
        items = join(req.format, items, _page_items(req, p))
        if p.system_json and i:
            fault(_tail_pages(req), f"system text on page {i + 1}: {p.system_json}")
        elif p.system_json:
            system = json.loads(p.system_json)
    return Answer(pages[0].change, pages[0].info, items, system)


def _tail_pages(req: pb.GetContextRequest) -> str | None:
    """A tail read in OpenAI/Anthropic JSON is rendered page by page."""
    return "tail-pages" if req.last_n and req.format in (OPENAI, ANTHROPIC) else None


def check_refusal(call, field_name: str, *args) -> None:
    try:
        call(*args)
    except grpc.RpcError as exc:
        assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT, exc
        assert bad_field(exc) == field_name, (bad_field(exc), field_name)
        return
    raise AssertionError(f"options refused on {field_name} were accepted")


# -- the providers' rules --------------------------------------------------------------------
def check_openai(msgs: list[dict], tail: bool) -> None:
    sdk_valid(OPENAI_MESSAGES, msgs)
    i = 0
    while i < len(msgs):
        m = msgs[i]
        i += 1
        if m["role"] == "tool":
            fault("tail-cut" if tail else None, f"tool message {i - 1} follows no call: {m}")
            continue
        calls = [c["id"] for c in m.get("tool_calls") or ()]
        answered = []
        while i < len(msgs) and msgs[i]["role"] == "tool":
            answered.append(msgs[i]["tool_call_id"])
            i += 1
        _round(calls, answered, i < len(msgs), tail)
    calls = [c["id"] for m in msgs for c in m.get("tool_calls") or ()]
    assert len(set(calls)) == len(calls), f"call ids repeat in one request: {calls}"


def _round(calls: list[str], answered: list[str], more: bool, tail: bool) -> None:
    """One assistant turn's calls and the results right after it."""
    if len(set(answered)) != len(answered):
        fault(None, f"a call is answered twice: {answered}")
    if not set(answered) <= set(calls):
        fault("tail-cut" if tail else None, f"results {answered} answer no call of {calls}")
    missing = set(calls) - set(answered)
    if missing and more:
        fault(None, f"calls {sorted(missing)} unanswered before later messages")
    elif missing and answered:
        fault("trailing-stand-in", f"trailing round {calls} answered only by {answered}")


def check_anthropic(system: list | None, msgs: list[dict], tail: bool) -> None:
    sdk_valid(ANTHROPIC_SYSTEM, system or [])
    sdk_valid(ANTHROPIC_MESSAGES, msgs)
    if msgs and msgs[0]["role"] != "user":
        fault("tail-cut" if tail else None, f"the first message is {msgs[0]['role']}")
    for a, b in zip(msgs, msgs[1:], strict=False):
        assert a["role"] != b["role"], "roles must alternate"
    marks = [b for m in msgs for b in m["content"] if "cache_control" in b]
    marks += [b for b in system or () if "cache_control" in b]
    assert len(marks) <= 1, f"{len(marks)} cache breakpoints"
    uses: list[str] = []
    for i, m in enumerate(msgs):
        blocks = m["content"]
        assert blocks, f"message {i} is empty"
        assert all(b["text"].strip() for b in blocks if b["type"] == "text"), "a blank text"
        results = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
        lead = [b["type"] for b in blocks[: len(results)]]
        if lead != ["tool_result"] * len(results):
            fault("tail-cut" if tail else None, f"tool_result blocks come first: {m}")
        if m["role"] == "user":
            only_results = len(results) == len(blocks)
            _round(uses, results, i + 1 < len(msgs) or not only_results, tail)
            uses = []
        else:
            uses = [b["id"] for b in blocks if b["type"] == "tool_use"]
    ids = [b["id"] for m in msgs for b in m["content"] if b["type"] == "tool_use"]
    assert all(ANTHROPIC_ID.fullmatch(c) for c in ids), ids
    assert len(set(ids)) == len(ids), f"tool_use ids repeat in one request: {ids}"


def check_responses(items: list[dict], reasoning_of: dict, follows: dict, tail: bool) -> None:
    """SDK types; an output after its call; a function_call after the
    reasoning item it came with, and that item right before its calls."""
    sdk_valid(RESPONSES_INPUT, items)
    calls: set[str] = set()
    ids = [i.get("id") for i in items]
    for n, item in enumerate(items):
        kind = item.get("type")
        if kind == "function_call":
            calls.add(item["call_id"])
            rs = reasoning_of.get(item.get("id"))
            if rs is not None and rs not in ids[:n]:
                fault("responses-tail" if tail else "reasoning-fold", f"{item['id']} lost {rs}")
        elif kind == "function_call_output" and item["call_id"] not in calls:
            fault("responses-tail" if tail else None, f"output {item['call_id']} answers no call")
        elif kind == "reasoning" and item.get("id") in follows:
            after = items[n + 1].get("id") if n + 1 < len(items) else None
            if after != follows[item["id"]]:
                fault(None, f"reasoning {item['id']} is not followed by {follows[item['id']]}")


def check_ctxd(items: list[dict]) -> None:
    for d in items:
        json_format.ParseDict(d, pb.Message())


def check_tail(whole: list[dict], tail: list[dict], n: int) -> None:
    """A ctxd-shape tail read (``last_n=n``) of ``whole`` (the same read
    without last_n, summary and plan blocks left out): the end of it, at
    least ``n`` messages, never opening inside a tool round (every result in
    it that answers an earlier call has that call in it), nor right after a
    Responses reasoning item; longer than ``n`` only where that rule asks."""
    ids, every = [m.get("id") for m in tail], [m.get("id") for m in whole]
    assert ids == every[len(every) - len(ids) :], "a tail is the end of the whole"
    assert len(ids) >= min(n, len(every)), f"a tail of {n} holds {len(ids)}"
    start = len(whole) - len(tail)
    calls = {}  # call id -> the index of the latest call with it, up to each result
    for i, m in enumerate(whole):
        for c in m.get("assistant", {}).get("toolCalls", ()):
            calls[c["id"]] = i
        answered = m.get("tool", {}).get("callId")
        if i >= start and answered in calls:
            assert calls[answered] >= start, f"the tail opens inside the round of {answered}"
    if start and _reasoning(whole[start - 1]):
        raise AssertionError("the tail opens right after the reasoning item of its first call")
    if len(ids) > n:
        first = whole[start]
        opens_round = bool(first.get("assistant", {}).get("toolCalls")) or _reasoning(first)
        assert opens_round, f"a tail of {n} holds {len(ids)} without a round to keep whole"


def _reasoning(m: dict) -> bool:
    native = m.get("native", {})
    return native.get("format") == NATIVE_FORMAT and m.get("note", {}).get("text", "").startswith(
        "[reasoning]"
    )
