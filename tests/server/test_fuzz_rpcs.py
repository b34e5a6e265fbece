"""Fuzz of every RPC with hostile JSON, tampered tokens and deep nesting,
over real gRPC against one sidecar (LMDB) for the module: no answer is
INTERNAL (or UNKNOWN). Bad input is the client's fault and gets a status
naming it; the context and memory stay usable throughout.

Strings are drawn from a pool built for each field: JSON with lone
surrogate escapes (``"\\ud800"``), nesting far past the limit, ctxd-shape
``[1]``/``[null]``, provider-shaped messages with one part replaced by a
hostile value, and tokens and references the sidecar itself returned
(page tokens, plan_refs, ExpandCompaction tokens, Memory.List tokens) with
their decoded parts tampered with and encoded again.
"""

from __future__ import annotations

import base64
import json
import threading
import uuid

import grpc
import pytest
from google.protobuf.descriptor import FieldDescriptor as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as cpb
from ctxd_sidecar.api.ctxd.v1 import memory_pb2 as mpb
from ctxd_sidecar.config.loader import load_config
from tests.conftest import InProcessSidecar

# One worker runs the module in order: the tests share one fuzzed sidecar and
# the last one judges the tally of every call made before it.
pytestmark = pytest.mark.xdist_group("fuzz")

SC = grpc.StatusCode
#: Codes that say "the server failed", which hostile input must never cause.
SERVER_FAULTS = {SC.INTERNAL, SC.UNKNOWN}
EXAMPLES = 40
SERVICES = {
    "ctxd.v1.ContextService": (cpb, cpb.DESCRIPTOR.services_by_name["ContextService"]),
    "ctxd.v1.MemoryService": (mpb, mpb.DESCRIPTOR.services_by_name["MemoryService"]),
}
METHODS = [(svc, m.name) for svc, (_, d) in SERVICES.items() for m in d.methods]
#: Calls made, and their codes, across the module (printed by the last test).
TALLY: dict[str, int] = {}
_LOCK = threading.Lock()
CIDS = ("fz", "fz2", "root")


# -- the sidecar and what it handed out -----------------------------------------------------
def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _user(text):
    return cpb.Message(user=cpb.UserMessage(text=text))


def _call(text, cid):
    return cpb.Message(
        assistant=cpb.AssistantMessage(
            text=text, tool_calls=[cpb.ToolCall(id=cid, name="sh", arguments_json='{"a":1}')]
        )
    )


def _result(cid):
    return cpb.Message(tool=cpb.ToolResult(call_id=cid, name="sh", text="ok"))


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory):
    """One sidecar with a compacted conversation, a plan and memory keys;
    yields it with the tokens and references it returned."""
    path = tmp_path_factory.mktemp("fuzz-lmdb")
    cfg = load_config(
        env={},
        overrides={
            "store": f"lmdb://{path}?map_size=256MiB",
            "listen": "127.0.0.1:0",
            "contexts.keep_last": 2,
        },
    )
    sc = InProcessSidecar(cfg)
    ctx = sc.running().contexts
    mem = sc.running().memory
    for cid in ("fz", "fz2"):
        for i in range(6):
            ctx.AppendTurn(
                cpb.AppendTurnRequest(
                    context_id=cid,
                    messages=[_user(f"q{i}?"), _call("", "call0"), _result("call0"), _user("ok")],
                )
            )
    compacted = ctx.Compact(cpb.CompactRequest(context_id="fz"))
    assert compacted.compacted, compacted.reason
    for i in range(6):
        ctx.AppendTurn(
            cpb.AppendTurnRequest(context_id="fz", messages=[_user(f"later {i}"), _call("", "c")])
        )
        ctx.AppendTurn(cpb.AppendTurnRequest(context_id="fz", messages=[_result("c")]))
    ctx.UpdatePlan(
        cpb.UpdatePlanRequest(
            context_id="fz",
            create=cpb.PlanCreate(goal="g", items=[cpb.PlanItemSpec(title="t")]),
        )
    )
    for i in range(5):
        mem.Set(mpb.SetRequest(key=f"k/{i}", value_json=json.dumps({"i": i})))
    tokens = {
        "page": ctx.GetContext(
            cpb.GetContextRequest(context_id="fz", view=cpb.CONTEXT_VIEW_SLICE, page_size=2)
        ).next_page_token,
        "full_page": ctx.GetContext(
            cpb.GetContextRequest(context_id="fz", view=cpb.CONTEXT_VIEW_FULL, page_size=2)
        ).next_page_token,
        "json_page": ctx.GetContext(
            cpb.GetContextRequest(
                context_id="fz",
                view=cpb.CONTEXT_VIEW_SLICE,
                format=cpb.MESSAGE_FORMAT_ANTHROPIC,
                page_size=1,
            )
        ).next_page_token,
        "plan_ref": ctx.PlanCompaction(cpb.PlanCompactionRequest(context_id="fz2")).plan_ref,
        "expand": ctx.ExpandCompaction(
            cpb.ExpandCompactionRequest(
                context_id="fz", compaction_id=compacted.compaction.id, page_size=1
            )
        ).next_page_token,
        "memory": mem.List(mpb.ListRequest(prefix="k/", limit=2)).next_page_token,
        "compaction_id": compacted.compaction.id,
    }
    assert all(tokens.values()), tokens
    yield sc, tokens
    sc.close()


# -- hostile values ------------------------------------------------------------------------------
LONE = ['"\\ud800"', '"\\udfff"', '"a\\ud83d"', '{"\\udc00":1}', '["x\\ud800y"]']
DEEP = ["[" * 5000 + "]" * 5000, '{"a":' * 3000 + "1" + "}" * 3000, "[" * 70 + "]" * 70]
SHAPES = ["[1]", "[null]", "[[]]", '["x"]', "1", "null", '"s"', "{}", "[]", "[{}]", "NaN"]
SHAPES += ["1e999", "-1e999", "9" * 400, "[1,]", "{", "\u0000", "[true]", '[{"user":1}]']


def _json_values():
    """JSON values whose strings may hold lone surrogates (serialized with escapes)."""
    text = st.text(max_size=8) | st.sampled_from(["\ud800", "x\udfffy", "\ud83d"])
    leaf = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | text
    return st.recursive(
        leaf,
        lambda kids: st.lists(kids, max_size=3) | st.dictionaries(text, kids, max_size=3),
        max_leaves=12,
    )


def _dump(value) -> str:
    return json.dumps(value, ensure_ascii=True)  # lone surrogates become \\udXXX escapes


OPENAI_TURN = [
    {"role": "user", "content": "hi"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "functions.Bash:0",
                "type": "function",
                "function": {"name": "b", "arguments": "{}"},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "functions.Bash:0", "content": "done"},
]
ANTHROPIC_TURN = [
    {"role": "user", "content": [{"type": "text", "text": "hi"}]},
    {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "call|2", "name": "b", "input": {"x": 1}}],
    },
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call|2", "content": "r"}]},
]


def _paths(value, prefix=()):
    """Every (path) to a part of ``value``."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*prefix, i))


def _replaced(value, path, new):
    if not path:
        return new
    out = json.loads(json.dumps(value))
    at = out
    for p in path[:-1]:
        at = at[p]
    at[path[-1]] = new
    return out


@st.composite
def provider_turns(draw):
    """A provider-shaped turn with one part replaced by a hostile value."""
    base = draw(st.sampled_from([OPENAI_TURN, ANTHROPIC_TURN, [{"user": {"text": "x"}}]]))
    path = draw(st.sampled_from(list(_paths(base))))
    new = draw(_json_values() | st.sampled_from(["\ud800", "call|x", "", "functions.X:1"]))
    return _dump(_replaced(base, path, new))


@st.composite
def tampered(draw, token: str):
    """``token`` with its decoded JSON parts changed (or its text mangled)."""
    head, _, body = token.rpartition(".")
    head = head + "." if head else ""
    try:
        parts = json.loads(_unb64(body))
    except ValueError:
        parts = None
    how = draw(st.sampled_from(["part", "part", "text", "whole"]))
    if how == "part" and isinstance(parts, list) and parts:
        i = draw(st.integers(0, len(parts) - 1))
        new = draw(
            _json_values()
            | st.sampled_from([-1, 2**70, 1e308, "", "\ud800", True, [], {}, "x" * 40])
        )
        parts[i] = new
        return head + _b64(_dump(parts).encode())
    if how == "whole":
        doc = draw(st.sampled_from([*LONE, *SHAPES, "[" * 150 + "]" * 150]))
        return head + _b64(doc.encode())
    i = draw(st.integers(0, max(0, len(token) - 1)))
    ch = draw(st.characters(codec="utf-8"))
    return token[:i] + ch + token[i + 1 :]


def hostile_strings(tokens: dict[str, str]):
    real = st.sampled_from(list(tokens.values()))
    return st.one_of(
        st.sampled_from([*LONE, *DEEP, *SHAPES, *CIDS, "", "k/1", "openai", "extractive"]),
        _json_values().map(_dump),
        provider_turns(),
        real,
        real.flatmap(tampered),
        st.text(max_size=40),
    )


# -- requests built from a message's descriptor ---------------------------------------------
def _scalar(draw, f, tokens):
    t = f.type
    if t == F.TYPE_STRING:
        if f.name in ("context_id",):
            return draw(st.sampled_from(CIDS) | hostile_strings(tokens))
        return draw(hostile_strings(tokens))
    if t == F.TYPE_BYTES:
        return draw(st.binary(max_size=16))
    if t == F.TYPE_BOOL:
        return draw(st.booleans())
    if t == F.TYPE_ENUM:
        return draw(st.sampled_from([v.number for v in f.enum_type.values]) | st.integers(-3, 99))
    if t in (F.TYPE_INT32, F.TYPE_SINT32, F.TYPE_SFIXED32):
        return draw(st.integers(-(2**31), 2**31 - 1) | st.integers(-2, 12))
    if t in (F.TYPE_UINT32, F.TYPE_FIXED32):
        return draw(st.integers(0, 2**32 - 1) | st.integers(0, 12))
    if t in (F.TYPE_INT64, F.TYPE_SINT64, F.TYPE_SFIXED64):
        return draw(st.integers(-(2**63), 2**63 - 1) | st.integers(-2, 40))
    if t in (F.TYPE_UINT64, F.TYPE_FIXED64):
        return draw(st.integers(0, 2**64 - 1) | st.integers(0, 40))
    if t in (F.TYPE_DOUBLE, F.TYPE_FLOAT):
        return draw(st.floats(allow_nan=False, width=32))
    return None


def _fill(draw, msg, tokens, depth=0):
    for f in msg.DESCRIPTOR.fields:
        if not draw(st.booleans()):
            continue
        if f.type == F.TYPE_MESSAGE:
            if depth >= 3 or f.message_type.GetOptions().map_entry:
                continue
            count = draw(st.integers(1, 2)) if f.is_repeated else 1
            for _ in range(count):
                sub = getattr(msg, f.name).add() if f.is_repeated else getattr(msg, f.name)
                sub.SetInParent()
                _fill(draw, sub, tokens, depth + 1)
            continue
        value = _scalar(draw, f, tokens)
        if value is None:
            continue
        if f.is_repeated:
            getattr(msg, f.name).append(value)
        else:
            setattr(msg, f.name, value)


@st.composite
def requests(draw, cls, tokens):
    msg = cls()
    _fill(draw, msg, tokens)
    return msg


def _call_rpc(sc, svc: str, method: str, req) -> SC:
    module, desc = SERVICES[svc]
    md = desc.methods_by_name[method]
    path = f"/{svc}/{method}"
    out_cls = getattr(module, md.output_type.name)
    try:
        if md.server_streaming:
            stream = sc.channel.unary_stream(
                path,
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=out_cls.FromString,
            )(req, timeout=0.5)
            for _ in stream:
                pass
        else:
            sc.channel.unary_unary(
                path,
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=out_cls.FromString,
            )(req, timeout=20)
    except grpc.RpcError as exc:
        code = exc.code()
        assert code not in SERVER_FAULTS, f"{method}: {code} {exc.details()!r} for {req!r}"[:3000]
        if md.server_streaming and code == SC.DEADLINE_EXCEEDED:
            return SC.OK  # a watch that waits is answering
        return code
    return SC.OK


def _tally(method: str, code: SC) -> None:
    with _LOCK:
        TALLY[f"{method}:{code.name}"] = TALLY.get(f"{method}:{code.name}", 0) + 1
        TALLY["calls"] = TALLY.get("calls", 0) + 1


FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=False,
)


@pytest.mark.parametrize(("svc", "method"), METHODS, ids=[m for _, m in METHODS])
def test_every_rpc_answers_hostile_requests_without_a_server_fault(fuzzed, svc, method):
    sc, tokens = fuzzed
    module, desc = SERVICES[svc]
    cls = getattr(module, desc.methods_by_name[method].input_type.name)

    @FUZZ
    @given(req=requests(cls, tokens))
    def run(req):
        _tally(method, _call_rpc(sc, svc, method, req))

    run()


# -- targeted: the fields that carry JSON, tokens and references ----------------------------------
@st.composite
def targeted(draw, tokens):
    """(service, method, request) aimed at one JSON, token or reference field."""
    hostile = hostile_strings(tokens)
    cid = draw(st.sampled_from(CIDS))
    kind = draw(
        st.sampled_from(
            ["turn", "read", "apply", "expand", "list", "set", "preflight", "turn_read"]
        )
    )
    ctx, mem = "ctxd.v1.ContextService", "ctxd.v1.MemoryService"
    fmt = draw(st.sampled_from([1, 2, 3, 0, 9]))
    if kind == "turn":
        req = cpb.AppendTurnRequest(context_id=cid, messages_json=draw(hostile), format=fmt)
        if draw(st.booleans()):
            req.system_json = draw(hostile)
        return ctx, "AppendTurn", req
    if kind in ("read", "turn_read"):
        read = cpb.GetContextRequest(
            context_id=cid,
            view=draw(st.sampled_from([1, 2, 3])),
            page_token=draw(
                st.sampled_from([tokens["page"], tokens["full_page"], tokens["json_page"]]).flatmap(
                    lambda t: tampered(t)
                )
                | hostile
            ),
            format=draw(st.sampled_from([0, 1, 2, 3])),
            page_size=draw(st.integers(0, 5)),
        )
        if draw(st.booleans()):
            read.since_version = draw(st.integers(0, 40))
            read.since_incarnation = draw(st.sampled_from(["", "deadbeef"]) | hostile)
        if kind == "read":
            return ctx, "GetContext", read
        read.page_token = ""
        turn = cpb.AppendTurnRequest(context_id=cid, messages=[_user("hi")], read=read)
        return ctx, "AppendTurn", turn
    if kind == "apply":
        ref = draw(tampered(tokens["plan_ref"]) | hostile | st.just(tokens["plan_ref"]))
        answer = draw(hostile | st.sampled_from(['{"goals":["\\ud800"]}', '{"open":' + "[" * 90]))
        return (
            ctx,
            "ApplyCompaction",
            cpb.ApplyCompactionRequest(context_id="fz2", plan_ref=ref, answer=answer),
        )
    if kind == "expand":
        return (
            ctx,
            "ExpandCompaction",
            cpb.ExpandCompactionRequest(
                context_id="fz",
                compaction_id=draw(st.just(tokens["compaction_id"]) | hostile),
                page_token=draw(
                    tampered(tokens["expand"]) | hostile | st.sampled_from(["e²", "e٣"])
                ),
                page_size=draw(st.integers(0, 3)),
            ),
        )
    if kind == "list":
        return (
            mem,
            "List",
            mpb.ListRequest(
                prefix=draw(st.just("k/") | hostile),
                page_token=draw(tampered(tokens["memory"]) | hostile),
                limit=draw(st.integers(0, 3)),
            ),
        )
    if kind == "set":
        return mem, "Set", mpb.SetRequest(key=f"f/{uuid.uuid4().hex[:6]}", value_json=draw(hostile))
    return ctx, "SetPreflight", cpb.SetPreflightRequest(context_id=cid, verdict_json=draw(hostile))


@settings(
    max_examples=EXAMPLES * 10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_json_fields_tokens_and_references_never_fault(fuzzed, data):
    sc, tokens = fuzzed
    svc, method, req = data.draw(targeted(tokens))
    _tally(method, _call_rpc(sc, svc, method, req))


def test_the_conversation_is_still_usable_and_nothing_faulted(fuzzed):
    """Runs last: after the fuzz, a turn, reads in every format and a compaction
    work (the fuzz may have deleted a conversation: the turn starts it again)."""
    sc, _ = fuzzed
    ctx = sc.running().contexts
    for cid in ("fz", "fz2"):
        ctx.AppendTurn(
            cpb.AppendTurnRequest(context_id=cid, messages=[_user("after"), _call("", "z")])
        )
        ctx.AppendTurn(cpb.AppendTurnRequest(context_id=cid, messages=[_result("z")]))
    for fmt in (cpb.MESSAGE_FORMAT_OPENAI, cpb.MESSAGE_FORMAT_ANTHROPIC, cpb.MESSAGE_FORMAT_CTXD):
        for cid in ("fz", "fz2"):
            ctx.GetContext(
                cpb.GetContextRequest(context_id=cid, view=cpb.CONTEXT_VIEW_SLICE, format=fmt)
            )
    ctx.PlanCompaction(cpb.PlanCompactionRequest(context_id="fz2"))
    faults = {k: v for k, v in TALLY.items() if k.endswith((":INTERNAL", ":UNKNOWN"))}
    print(f"\nfuzz: {TALLY.get('calls', 0)} calls, {len(faults)} server faults; codes:")
    for k in sorted(TALLY):
        print(f"  {k} {TALLY[k]}")
    assert not faults
