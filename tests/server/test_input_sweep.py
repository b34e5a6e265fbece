"""Input sweep: every RPC of MemoryService and ContextService gets hostile
input (empty, oversized past gRPC's and ctxd's own caps, malformed and deep
JSON, invalid ids and keys, bytes that are not the request type, unknown
enum numbers, negative and huge numbers, a missing or wrong token). Each
answer has the documented status code and a message that leaks no paths or
internals; a valid call right after succeeds and stored data never changes.

RPCs that the server answers UNIMPLEMENTED for an empty request are skipped
(they are not built yet); once they answer, the generic cases apply to them.
"""

from __future__ import annotations

import re
import threading

import grpc
import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as cpb
from ctxd_sidecar.api.ctxd.v1 import memory_pb2 as mpb

SC = grpc.StatusCode
TOKEN = "sweep-token-1234"
MIB = 1024 * 1024

SERVICES = {
    "ctxd.v1.MemoryService": mpb.DESCRIPTOR.services_by_name["MemoryService"],
    "ctxd.v1.ContextService": cpb.DESCRIPTOR.services_by_name["ContextService"],
}
METHODS = [(svc_name, m.name) for svc_name, svc in SERVICES.items() for m in svc.methods]

#: Inputs tried across the whole module (printed at the end of each test).
COUNT = {"inputs": 0}
_COUNT_LOCK = threading.Lock()

#: Things an error message must never contain (paths, tracebacks, store URIs).
LEAKS = ("Traceback", 'File "', "site-packages", ".py", "lmdb://", "s3://", "http://", "/tmp")
#: An absolute path (two or more segments after a leading "/").
ABS_PATH = re.compile(r"(?:^|[\s(=:'\"])/(?:[\w.-]+/)+[\w.-]*")


def method_desc(svc: str, name: str):
    return SERVICES[svc].methods_by_name[name]


def request_class(svc: str, name: str):
    desc = method_desc(svc, name).input_type
    module = mpb if svc.endswith("MemoryService") else cpb
    return getattr(module, desc.name)


def raw_call(channel, svc: str, name: str, payload: bytes, metadata=None, timeout: float = 20):
    """Send ``payload`` as the request bytes, whatever they are; return the code
    and message (streams are read to the end or the deadline)."""
    path = f"/{svc}/{name}"
    md = method_desc(svc, name)
    try:
        if md.server_streaming:
            stream = channel.unary_stream(path)(payload, metadata=metadata, timeout=timeout)
            for _ in stream:
                pass
        else:
            channel.unary_unary(path)(payload, metadata=metadata, timeout=timeout)
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or ""
    return SC.OK, ""


def assert_clean_message(message: str, secrets: tuple[str, ...] = ()) -> None:
    for leak in (*LEAKS, *secrets):
        assert leak not in message, f"message leaks {leak!r}: {message!r}"
    assert not ABS_PATH.search(message), f"message has a path: {message!r}"


# -- wire-level helpers ---------------------------------------------------------------------
def varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_bytes(number: int, data: bytes) -> bytes:
    return varint((number << 3) | 2) + varint(len(data)) + data


def field_varint(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value)


def first_field(cls, kind: str):
    """The first field of ``cls`` of a wire kind ("string" or "varint")."""
    from google.protobuf.descriptor import FieldDescriptor as F

    for f in cls.DESCRIPTOR.fields:
        if f.is_repeated:
            continue
        if kind == "string" and f.type == F.TYPE_STRING:
            return f
        if kind == "varint" and f.type in (F.TYPE_INT32, F.TYPE_INT64, F.TYPE_BOOL, F.TYPE_ENUM):
            return f
    return None


def generic_cases(cls) -> list[tuple[str, bytes, set]]:
    """Cases that need nothing but the request type. Framework-level rejects
    (bytes that do not parse as the request type) are INTERNAL in grpcio;
    anything that parses goes through ctxd's validation."""
    parsed = {SC.OK, SC.INVALID_ARGUMENT, SC.NOT_FOUND, SC.FAILED_PRECONDITION}
    # ctxd decodes requests itself (ctxd_sidecar.server.layers.decode), so bytes
    # that are not the method's message are INVALID_ARGUMENT naming "request".
    undecodable = {SC.INVALID_ARGUMENT}
    cases: list[tuple[str, bytes, set]] = [
        ("garbage", b"\xff\xff\xff\xff\xff", undecodable),
        ("truncated-length", b"\x0a\x7f abc", undecodable),
        ("truncated-varint", b"\x10\xff\xff", undecodable),
        ("group-wire-type", b"\x0b\x0c", undecodable | parsed),
        ("unknown-fields-only", field_varint(999, 7) + field_bytes(1000, b"zz"), parsed),
        (
            "oversized-past-grpc-limit",
            field_bytes(15, b"a" * (16 * MIB + 64)),
            {SC.RESOURCE_EXHAUSTED},
        ),
    ]
    s = first_field(cls, "string")
    if s is not None:
        cases += [
            ("invalid-utf8", field_bytes(s.number, b"\xc3\x28\xff"), undecodable),
            ("string-as-varint", field_varint(s.number, 5), undecodable | parsed),
            (
                "oversized-string",
                field_bytes(s.number, b"k" * (16 * MIB + 1)),
                {SC.RESOURCE_EXHAUSTED},
            ),
        ]
    v = first_field(cls, "varint")
    if v is not None:
        cases += [
            ("varint-as-bytes", field_bytes(v.number, b"abc"), undecodable | parsed),
            ("varint-max", field_varint(v.number, (1 << 64) - 1), parsed),
        ]
    return cases


# -- ctxd-specific cases -------------------------------------------------------------------
IA, NF, RE, OK, AB = SC.INVALID_ARGUMENT, SC.NOT_FOUND, SC.RESOURCE_EXHAUSTED, SC.OK, SC.ABORTED

BAD_KEYS = [
    "",
    "_reserved",
    "a b",
    "tab\tkey",
    "nl\nkey",
    "a//b",
    "/lead",
    "trail/",
    "a/./b",
    "a/../b",
    "..",
    ".",
    "k" * 257,
    "nul\x00",
    "del\x7f",
    "c1\x85",
    "nbsp\u00a0key",
    "\u2028",
]
BAD_CONTEXT_IDS = [
    "",
    "-lead",
    ".lead",
    "a/b",
    "../etc",
    "a b",
    "x" * 129,
    "caf\u00e9",
    "nul\x00",
    "semi;colon",
    "_x",
    "a\nb",
]
BAD_JSON = [
    "",
    "{",
    "[1,]",
    "{'a':1}",
    "NaN",
    "Infinity",
    "-Infinity",
    "[NaN]",
    "01",
    "1 2",
    "tru",
    '{"a":1,}',
    '"unterminated',
    "[1]x",
    "\x00",
    '{"a"}',
    "{}{}",
]


def deep(n: int) -> str:
    return "[" * n + "]" * n


def deep_obj(n: int) -> str:
    return '{"a":' * n + "1" + "}" * n


def memory_cases() -> dict[str, list[tuple[str, object, set]]]:
    GetR, SetR, DelR, ListR = mpb.GetRequest, mpb.SetRequest, mpb.DeleteRequest, mpb.ListRequest
    cases: dict[str, list] = {"Get": [], "Set": [], "Delete": [], "List": []}
    for i, k in enumerate(BAD_KEYS):
        cases["Get"].append((f"bad-key-{i}", GetR(key=k), {IA}))
        cases["Set"].append((f"bad-key-{i}", SetR(key=k, value_json="1"), {IA}))
        cases["Delete"].append((f"bad-key-{i}", DelR(key=k), {IA}))
    for i, p in enumerate(["_x", "a b", "//", "a/../", "p" * 257, "\x01"]):
        cases["List"].append((f"bad-prefix-{i}", ListR(prefix=p), {IA}))
    for i, j in enumerate(BAD_JSON):
        cases["Set"].append((f"bad-json-{i}", SetR(key="sweep/j", value_json=j), {IA}))
    cases["Set"] += [
        ("deep-65", SetR(key="sweep/d", value_json=deep(65)), {IA}),
        ("deep-10000", SetR(key="sweep/d", value_json=deep(10_000)), {IA}),
        ("deep-obj-10000", SetR(key="sweep/d", value_json=deep_obj(5_000)), {IA}),
        ("deep-past-value-cap", SetR(key="sweep/d", value_json=deep(40_000)), {RE}),
        ("value-past-cap", SetR(key="sweep/big", value_json='"' + "v" * (64 * 1024) + '"'), {RE}),
        ("value-10mib", SetR(key="sweep/big", value_json='"' + "v" * (10 * MIB) + '"'), {RE}),
        ("ttl-negative", SetR(key="sweep/t", value_json="1", ttl_seconds=-1), {IA}),
        ("ttl-min-int64", SetR(key="sweep/t", value_json="1", ttl_seconds=-(2**63)), {IA}),
        ("ttl-max-int64", SetR(key="sweep/t", value_json="1", ttl_seconds=2**63 - 1), {IA}),
        ("ttl-past-100y", SetR(key="sweep/t", value_json="1", ttl_seconds=101 * 365 * 86400), {IA}),
        (
            "cas-and-create-only",
            SetR(key="seed/a", value_json="1", expected_version="x", create_only=True),
            {IA},
        ),
        (
            "cas-huge-version",
            SetR(key="seed/a", value_json="1", expected_version="v" * 10_000),
            {IA},
        ),
        (
            "cas-wrong-version",
            SetR(key="seed/a", value_json="1", expected_version="nope"),
            {AB, IA},
        ),
        ("create-only-existing", SetR(key="seed/a", value_json="1", create_only=True), {AB}),
        ("by-too-long", SetR(key="sweep/b", value_json="1", by="b" * 10_000), {IA}),
        ("by-control", SetR(key="sweep/b", value_json="1", by="x\x00y"), {IA}),
    ]
    cases["Delete"] += [
        ("cas-wrong-version", DelR(key="seed/a", expected_version="nope"), {AB, IA}),
        ("cas-missing-key", DelR(key="sweep/none", expected_version="v1"), {AB, IA}),
        ("cas-huge-version", DelR(key="seed/a", expected_version="v" * 10_000), {IA}),
    ]
    cases["Get"].append(("missing", GetR(key="sweep/none"), {NF}))
    cases["List"] += [
        ("limit-negative", ListR(limit=-1), {IA}),
        ("limit-min-int32", ListR(limit=-(2**31)), {IA}),
        ("limit-max-int32", ListR(limit=2**31 - 1), {OK}),
        ("token-garbage", ListR(page_token="!!!"), {IA}),
        ("token-not-json", ListR(page_token="aGVsbG8"), {IA}),
        ("token-other-prefix", ListR(prefix="zz", page_token="WyJ4IiwieSJd"), {IA}),
        ("token-wrong-shape", ListR(page_token="WzEsMl0"), {IA}),
        ("token-huge", ListR(page_token="A" * MIB), {IA}),
    ]
    return cases


def context_cases() -> dict[str, list[tuple[str, object, set]]]:
    A, G, L, D, U = (
        cpb.AppendTurnRequest,
        cpb.GetContextRequest,
        cpb.ListContextsRequest,
        cpb.DeleteContextRequest,
        cpb.RecordUsageRequest,
    )
    M = cpb.Message

    def u(text="hi"):
        return M(user=cpb.UserMessage(text=text))

    def call(args="{}", cid="c1", name="f"):
        return M(
            assistant=cpb.AssistantMessage(
                tool_calls=[cpb.ToolCall(id=cid, name=name, arguments_json=args)]
            )
        )

    def res(content, cid="c1", as_json=True):
        t = (
            cpb.ToolResult(call_id=cid, name="f", json=content)
            if as_json
            else cpb.ToolResult(call_id=cid, name="f", text=content)
        )
        return M(tool=t)

    def item(m, data: bytes, fmt: str = "openai.responses.item"):
        m.native.format, m.native.data = fmt, data
        return m

    cases: dict[str, list] = {
        k: [] for k in ("AppendTurn", "GetContext", "ListContexts", "DeleteContext", "RecordUsage")
    }
    # A Responses item as a native payload must be one item standing for its message.
    fco = b'{"type":"function_call_output","call_id":"nope","output":"x"}'
    for label, m in [
        ("not-utf8", item(u(), b'{"role":"user","content":"\xff"}')),
        ("not-json", item(u(), b"{")),
        ("empty", item(u(), b"")),
        ("array", item(u(), b"[]")),
        ("deep", item(u(), b"[" * 100_000)),
        ("no-role", item(u(), b'{"content":"x"}')),
        ("system-for-user", item(u(), b'{"role":"system","content":"x"}')),
        ("call-for-user", item(u(), b'{"type":"function_call","call_id":"c","name":"f"}')),
        ("orphan-output-on-note", item(M(note=cpb.NoteMessage(text="x")), fco)),
        ("orphan-output-on-result", item(res("{}", cid="nope"), fco)),
        ("other-call-id", item(call(), b'{"type":"function_call","call_id":"c2","name":"f"}')),
        ("empty-format", item(u(), b"{}", fmt="")),
    ]:
        cases["AppendTurn"].append((f"native-{label}", A(context_id="sweep", messages=[m]), {IA}))
    for i, cid in enumerate(BAD_CONTEXT_IDS):
        cases["AppendTurn"].append((f"bad-id-{i}", A(context_id=cid, messages=[u()]), {IA}))
        cases["GetContext"].append((f"bad-id-{i}", G(context_id=cid), {IA}))
        cases["DeleteContext"].append((f"bad-id-{i}", D(context_id=cid), {IA}))
        cases["RecordUsage"].append((f"bad-id-{i}", U(context_id=cid, input_tokens=1), {IA}))
    for i, j in enumerate(BAD_JSON):
        if not j:
            continue  # empty arguments mean "no arguments"; tested elsewhere
        cases["AppendTurn"].append(
            (f"bad-args-json-{i}", A(context_id="sweep", messages=[call(j)]), {IA})
        )
        cases["AppendTurn"].append(
            (f"bad-result-json-{i}", A(context_id="sweep", messages=[call(), res(j)]), {IA})
        )
    big = "x" * (MIB + 1)
    cases["AppendTurn"] += [
        ("no-messages", A(context_id="sweep"), {IA}),
        ("kindless-message", A(context_id="sweep", messages=[M()]), {IA}),
        ("deep-args-100k", A(context_id="sweep", messages=[call(deep(100_000))]), {IA}),
        ("deep-result-100k", A(context_id="sweep", messages=[call(), res(deep_obj(50_000))]), {IA}),
        ("message-past-cap", A(context_id="sweep", messages=[u(big)]), {IA, RE}),
        ("args-past-cap", A(context_id="sweep", messages=[call('"' + big + '"')]), {IA, RE}),
        (
            "too-many-messages",
            A(context_id="sweep", messages=[u(str(i)) for i in range(257)]),
            {IA, RE},
        ),
        (
            "many-tiny-messages",
            A(context_id="sweep", messages=[u() for _ in range(200_000)]),
            {IA, RE},
        ),
        ("call-without-id", A(context_id="sweep", messages=[call(cid="")]), {IA}),
        ("call-without-name", A(context_id="sweep", messages=[call(name="")]), {IA}),
        ("duplicate-call-id", A(context_id="sweep", messages=[call(), call()]), {IA}),
        ("orphan-result", A(context_id="sweep", messages=[res("{}", cid="nope")]), {IA}),
        (
            "negative-ts",
            A(context_id="sweep", messages=[M(ts_ms=-1, user=cpb.UserMessage(text="x"))]),
            {IA},
        ),
        (
            "expected-version-negative",
            A(context_id="seed", messages=[u()], expected_version=-1),
            {IA},
        ),
        (
            "expected-version-huge",
            A(context_id="seed", messages=[u()], expected_version=2**63 - 1),
            {AB},
        ),
        ("expected-version-stale", A(context_id="seed", messages=[u()], expected_version=1), {AB}),
        ("model-window-negative", A(context_id="sweep", messages=[u()], model_window=-5), {IA}),
        ("model-window-min", A(context_id="sweep", messages=[u()], model_window=-(2**63)), {IA}),
        (
            "idem-key-too-long",
            A(context_id="sweep", messages=[u()], idempotency_key="k" * 129),
            {IA},
        ),
        ("principal-huge", A(context_id="sweep", messages=[u()], principal="p" * 100_000), {IA}),
        ("model-huge", A(context_id="sweep", messages=[u()], model="m" * 100_000), {IA}),
        ("task-huge", A(context_id="sweep", messages=[u()], task="t" * 100_000), {IA}),
    ]
    cases["GetContext"] += [
        ("unknown-view", G(context_id="seed", view=99), {IA}),
        ("negative-view", G(context_id="seed", view=-1), {IA}),
        ("missing", G(context_id="nosuch"), {NF}),
    ]
    cases["ListContexts"] += [
        ("unknown-kind", L(kind=42), {IA}),
        ("negative-kind", L(kind=-7), {IA}),
        ("page-size-negative", L(page_size=-1), {IA}),
        ("page-size-max", L(page_size=2**31 - 1), {OK}),
        ("token-garbage", L(page_token="!!!"), {IA}),
        ("token-huge", L(page_token="A" * MIB), {IA}),
    ]
    cases["DeleteContext"] += [
        ("root", D(context_id="root"), {SC.FAILED_PRECONDITION}),
        ("expected-version-negative", D(context_id="seed", expected_version=-1), {IA}),
        ("expected-version-stale", D(context_id="seed", expected_version=1), {AB}),
        ("missing", D(context_id="nosuch"), {OK}),
    ]
    cases["RecordUsage"] += [
        ("input-negative", U(context_id="seed", input_tokens=-1), {IA}),
        ("output-negative", U(context_id="seed", input_tokens=5, output_tokens=-1), {IA}),
        ("input-min-int64", U(context_id="seed", input_tokens=-(2**63)), {IA}),
        ("input-huge", U(context_id="seed", input_tokens=2**63 - 1), {OK, IA}),
        ("missing", U(context_id="nosuch", input_tokens=5), {NF}),
        ("model-huge", U(context_id="seed", input_tokens=5, model="m" * 100_000), {IA}),
    ]
    return cases


def later_context_cases() -> dict[str, list[tuple[str, object, set]]]:
    """Cases for the plan, compaction, skills and preflight RPCs: ids,
    unknown enum numbers, negative numbers, bad JSON."""
    bad = {IA, NF, SC.FAILED_PRECONDITION}
    out: dict[str, list] = {}
    for m in SERVICES["ctxd.v1.ContextService"].methods:
        cls = request_class("ctxd.v1.ContextService", m.name)
        if m.name in CONTEXT_CASES or "context_id" not in cls.DESCRIPTOR.fields_by_name:
            continue
        out[m.name] = [
            (f"bad-id-{i}", cls(context_id=c), {IA}) for i, c in enumerate(BAD_CONTEXT_IDS)
        ]
    P = cpb
    out.get("UpdatePlan", []).extend(
        [
            (
                "unknown-status",
                P.UpdatePlanRequest(
                    context_id="seed", update=P.PlanUpdate(item_id="i1", status=77)
                ),
                bad,
            ),
            (
                "unknown-bind-kind",
                P.UpdatePlanRequest(
                    context_id="seed",
                    update=P.PlanUpdate(item_id="i1", bind=P.PlanBinding(kind=9, id="r")),
                ),
                bad,
            ),
            (
                "negative-expected-version",
                P.UpdatePlanRequest(context_id="seed", clear=P.PlanClear(), expected_version=-1),
                bad,
            ),
            (
                "bad-item-id",
                P.UpdatePlanRequest(
                    context_id="seed",
                    create=P.PlanCreate(goal="g", items=[P.PlanItemSpec(id="a b", title="t")]),
                ),
                bad,
            ),
            ("no-op", P.UpdatePlanRequest(context_id="seed"), bad),
            (
                "insert-negative",
                P.UpdatePlanRequest(
                    context_id="seed",
                    insert=P.PlanInsert(item=P.PlanItemSpec(title="t"), position=-5),
                ),
                bad,
            ),
        ]
    )
    out.get("ReportRun", []).extend(
        [
            (
                "unknown-outcome",
                P.ReportRunRequest(
                    context_id="seed", binding=P.PlanBinding(kind=1, id="r"), outcome=42
                ),
                bad,
            ),
            (
                "unknown-kind",
                P.ReportRunRequest(
                    context_id="seed", binding=P.PlanBinding(kind=42, id="r"), outcome=1
                ),
                bad,
            ),
        ]
    )
    out.get("SetPreflight", []).extend(
        [
            (f"bad-json-{i}", P.SetPreflightRequest(context_id="seed", verdict_json=j), {IA})
            for i, j in enumerate(BAD_JSON)
            if j
        ]
        + [
            ("deep", P.SetPreflightRequest(context_id="seed", verdict_json=deep(5000)), {IA, RE}),
            (
                "past-cap",
                P.SetPreflightRequest(
                    context_id="seed", verdict_json='"' + "p" * (17 * 1024) + '"'
                ),
                {IA, RE},
            ),
            (
                "negative-expected-version",
                P.SetPreflightRequest(context_id="seed", verdict_json="{}", expected_version=-1),
                {IA},
            ),
        ]
    )
    out.get("PlanCompaction", []).extend(
        [
            ("keep-last-negative", P.PlanCompactionRequest(context_id="seed", keep_last=-1), {IA}),
            ("target-negative", P.PlanCompactionRequest(context_id="seed", target_tokens=-1), {IA}),
        ]
    )
    out.get("Compact", []).extend(
        [
            ("keep-last-negative", P.CompactRequest(context_id="seed", keep_last=-1), {IA}),
            ("unknown-summariser", P.CompactRequest(context_id="seed", summariser="no-such"), bad),
        ]
    )
    out.get("ApplyCompaction", []).extend(
        [
            (
                "bogus-plan-ref",
                P.ApplyCompactionRequest(context_id="seed", plan_ref="../../x", answer="{}"),
                bad | {AB},
            ),
            (
                "empty-plan-ref",
                P.ApplyCompactionRequest(context_id="seed", answer="{}"),
                bad | {AB},
            ),
        ]
    )
    return out


CONTEXT_CASES = context_cases()
SPECIFIC = {
    "ctxd.v1.MemoryService": memory_cases(),
    "ctxd.v1.ContextService": {**CONTEXT_CASES, **later_context_cases()},
}

#: Documented answers to an empty request.
EMPTY = {
    ("ctxd.v1.MemoryService", "List"): {OK},
    ("ctxd.v1.ContextService", "ListContexts"): {OK},
    ("ctxd.v1.ContextService", "ListSkills"): {OK},
}


# -- fixtures ---------------------------------------------------------------------------------
def seed(running) -> None:
    running.memory.Set(mpb.SetRequest(key="seed/a", value_json='{"n":1}'), timeout=10)
    running.memory.Set(
        mpb.SetRequest(key="seed/b", value_json="[1,2,3]", ttl_seconds=3600), timeout=10
    )
    for i in range(3):
        running.contexts.AppendTurn(
            cpb.AppendTurnRequest(
                context_id="seed", messages=[cpb.Message(user=cpb.UserMessage(text=f"s{i}"))]
            ),
            timeout=10,
        )


def snapshot(running, metadata=None) -> tuple:
    mem = running.memory.List(
        mpb.ListRequest(include_values=True, limit=1000), metadata=metadata, timeout=10
    )
    ctxs = running.contexts.ListContexts(
        cpb.ListContextsRequest(page_size=1000), metadata=metadata, timeout=10
    )
    full = {}
    for c in ctxs.contexts:
        ctx = running.contexts.GetContext(
            cpb.GetContextRequest(context_id=c.id), metadata=metadata, timeout=10
        ).context
        full[c.id] = (ctx.version, [m.SerializeToString() for m in ctx.messages])
    records = [(r.key, r.value_json, r.version, r.expires_at_ms) for r in mem.records]
    return records, full


def healthy(running, metadata=None) -> None:
    """A valid read and a valid write both succeed."""
    running.memory.Get(mpb.GetRequest(key="seed/a"), metadata=metadata, timeout=10)
    running.memory.Set(mpb.SetRequest(key="probe/x", value_json="1"), metadata=metadata, timeout=10)
    running.memory.Delete(mpb.DeleteRequest(key="probe/x"), metadata=metadata, timeout=10)


def implemented(channel, svc: str, name: str, metadata=None) -> bool:
    code, _ = raw_call(channel, svc, name, b"", metadata=metadata, timeout=5)
    return code != SC.UNIMPLEMENTED


@pytest.fixture(scope="module")
def lmdb_sidecar(start_module_sidecar):
    """One seeded sidecar for the module: every sweep compares the whole store
    before and after its inputs, so a sweep that changed anything fails there."""
    sc = start_module_sidecar(lambda d: f"lmdb://{d / 'sweep'}?map_size=512MiB")
    seed(sc)
    return sc, str(sc.extra["dir"])


@pytest.fixture(scope="module")
def authed_sidecar(start_module_sidecar):
    """One sidecar with a token for every way of getting the token wrong."""
    running = start_module_sidecar(lambda d: f"lmdb://{d / 'auth'}", auth_token=TOKEN)
    seed_md(running, [("authorization", f"Bearer {TOKEN}")])
    return running


def _bump(n: int = 1) -> None:
    with _COUNT_LOCK:
        COUNT["inputs"] += n


def _check(running, secrets, svc, name, label, payload, expected, metadata=None):
    code, message = raw_call(running.channel, svc, name, payload, metadata=metadata)
    _bump()
    assert code in expected, f"{name}/{label}: {code} {message!r}, expected {expected}"
    if code != SC.OK:
        assert message, f"{name}/{label}: {code} without a message"
        assert_clean_message(message, secrets)
    healthy(running, metadata)


# -- tests ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("svc", "name"), METHODS, ids=[f"{s.rsplit('.', 1)[-1]}.{n}" for s, n in METHODS]
)
def test_hostile_input_gets_a_clear_error_and_harms_nothing(lmdb_sidecar, svc, name):
    running, tmp = lmdb_sidecar
    if not implemented(running.channel, svc, name):
        pytest.skip(f"{svc}/{name} is not implemented yet")
    secrets = (tmp,)
    before = snapshot(running)
    cls = request_class(svc, name)

    empty = EMPTY.get((svc, name), {IA, OK, NF, SC.FAILED_PRECONDITION})
    _check(running, secrets, svc, name, "empty", b"", empty)
    for label, payload, expected in generic_cases(cls):
        _check(running, secrets, svc, name, label, payload, expected)
    for label, request, expected in SPECIFIC[svc].get(name, []):
        assert isinstance(request, cls)
        _check(running, secrets, svc, name, label, request.SerializeToString(), expected)

    # Cases that succeed must not have touched the seeded data; sweep/* may
    # hold an accepted write (none is expected) and is compared too.
    assert snapshot(running) == before
    print(f"\n{name}: inputs tried so far in this module: {COUNT['inputs']}")


@pytest.mark.parametrize(
    "metadata",
    [
        None,
        [("authorization", "Bearer wrong")],
        [("authorization", TOKEN)],
        [("authorization", "")],
        [("authorization", f"Bearer {TOKEN} ")],
        [("authorization", f"Basic {TOKEN}")],
    ],
    ids=["missing", "wrong", "no-scheme", "empty", "trailing-space", "other-scheme"],
)
def test_every_rpc_refuses_a_missing_or_wrong_token(authed_sidecar, metadata):
    running = authed_sidecar
    tmp_path = running.extra["dir"]
    good = [("authorization", f"Bearer {TOKEN}")]
    before = snapshot(running, good)
    tried = 0
    for svc, name in METHODS:
        cls = request_class(svc, name)
        # Even a request that would change data is refused before it is read.
        payloads = [b"", garbage_or_valid(cls)]
        for payload in payloads:
            code, message = raw_call(running.channel, svc, name, payload, metadata=metadata)
            tried += 1
            assert code == SC.UNAUTHENTICATED, f"{name}: {code} {message!r}"
            assert_clean_message(message, (str(tmp_path), TOKEN))
    _bump(tried)
    healthy(running, good)
    assert snapshot(running, good) == before
    print(f"\nauth: {tried} refused calls; inputs tried so far: {COUNT['inputs']}")


def seed_md(running, metadata) -> None:
    running.memory.Set(mpb.SetRequest(key="seed/a", value_json="1"), metadata=metadata, timeout=10)
    running.contexts.AppendTurn(
        cpb.AppendTurnRequest(
            context_id="seed", messages=[cpb.Message(user=cpb.UserMessage(text="s"))]
        ),
        metadata=metadata,
        timeout=10,
    )


def garbage_or_valid(cls) -> bytes:
    """A request that would write if it were accepted (for the write RPCs)."""
    if cls is mpb.SetRequest:
        return mpb.SetRequest(key="seed/a", value_json="2").SerializeToString()
    if cls is mpb.DeleteRequest:
        return mpb.DeleteRequest(key="seed/a").SerializeToString()
    if cls is cpb.AppendTurnRequest:
        return cpb.AppendTurnRequest(
            context_id="seed", messages=[cpb.Message(user=cpb.UserMessage(text="x"))]
        ).SerializeToString()
    if cls is cpb.DeleteContextRequest:
        return cpb.DeleteContextRequest(context_id="seed").SerializeToString()
    return b"\xff\xff"


def test_oversized_request_through_the_typed_stub_is_resource_exhausted(lmdb_sidecar):
    running, tmp = lmdb_sidecar
    err = None
    try:
        running.memory.Set(
            mpb.SetRequest(key="seed/a", value_json='"' + "x" * (17 * MIB) + '"'), timeout=30
        )
    except grpc.RpcError as exc:
        err = exc
    _bump()
    assert err is not None and err.code() == SC.RESOURCE_EXHAUSTED
    assert_clean_message(err.details(), (tmp,))
    healthy(running)
    assert running.memory.Get(mpb.GetRequest(key="seed/a")).record.value_json == '{"n":1}'
