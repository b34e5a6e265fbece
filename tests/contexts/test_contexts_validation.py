"""Bad input to ContextService: the right status, the field named in a
google.rpc.BadRequest, and nothing stored."""

from __future__ import annotations

import grpc
import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from tests.contexts.test_contexts import (
    append,
    assistant,
    bad_field,
    full,
    info,
    list_all,
    rpc_error,
    tool_json,
    tool_text,
    user,
)

LIMITS = {"contexts__max_message_bytes": 1000, "contexts__max_turn_messages": 4}


@pytest.fixture(params=["memory", "lmdb", "s3"])
def ctx_sidecar(request, start_sidecar, store_uri_for):
    r = start_sidecar(store_uri_for(request.param), **LIMITS)
    append(r.contexts, "existing", user("hello"), assistant("", ("call-1", "f", "{}")))
    return r


BAD_TURNS = [
    ("empty turn", [], "messages"),
    ("no kind", [user("ok"), pb.Message(ts_ms=5)], "messages[1]"),
    ("too many messages", [user("x")] * 5, "messages"),
    ("oversized message", [user("x" * 1001)], "messages[0]"),
    ("oversized tool result", [tool_text("call-1", "f", "é" * 501)], "messages[0]"),
    (
        "invalid arguments JSON",
        [assistant("", ("c9", "f", "{not json"))],
        "messages[0].assistant.tool_calls[0].arguments_json",
    ),
    (
        "NaN is not JSON",
        [assistant("", ("c9", "f", '{"x": NaN}'))],
        "messages[0].assistant.tool_calls[0].arguments_json",
    ),
    (
        "tool call without id",
        [assistant("", ("", "f", "{}"))],
        "messages[0].assistant.tool_calls[0].id",
    ),
    (
        "tool call without name",
        [assistant("", ("c9", "", "{}"))],
        "messages[0].assistant.tool_calls[0].name",
    ),
    (
        "repeated call id in a turn",
        [assistant("", ("c9", "f", "{}"), ("c9", "g", "{}"))],
        "messages[0].assistant.tool_calls[1].id",
    ),
    (
        "invalid tool result JSON",
        [user("u"), tool_json("call-1", "f", "{'a': 1}")],
        "messages[1].tool.json",
    ),
    ("empty tool result JSON", [tool_json("call-1", "f", "")], "messages[0].tool.json"),
    ("unknown call id", [user("u"), tool_text("nope", "f", "x")], "messages[1].tool.call_id"),
    (
        "two results for one call",
        [assistant("", ("c9", "f", "{}")), tool_text("c9", "f", "x"), tool_text("c9", "f", "y")],
        "messages[2].tool.call_id",
    ),
    (
        "result before its call",
        [tool_text("c9", "f", "x"), assistant("", ("c9", "f", "{}"))],
        "messages[0].tool.call_id",
    ),
    ("result without call id", [tool_text("", "f", "x")], "messages[0].tool.call_id"),
    (
        "negative timestamp",
        [pb.Message(ts_ms=-1, user=pb.UserMessage(text="x"))],
        "messages[0].ts_ms",
    ),
]


@pytest.mark.parametrize("cid", ["existing", "brand-new"])
@pytest.mark.parametrize("label, messages, field", BAD_TURNS, ids=[t[0] for t in BAD_TURNS])
def test_bad_turn_is_rejected_and_nothing_is_stored(ctx_sidecar, cid, label, messages, field):
    c = ctx_sidecar.contexts
    before = full(c, "existing")
    err = rpc_error(append, c, cid, *messages, idempotency_key="k")
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, label
    assert bad_field(err) == field
    assert field in err.details()
    assert full(c, "existing") == before
    if cid == "brand-new":
        assert rpc_error(info, c, cid).code() == grpc.StatusCode.NOT_FOUND
        assert cid not in [i.id for i in list_all(c)]
    # The idempotency key was not consumed by the failed call.
    ok = append(c, cid, user("fine"), idempotency_key="k")
    assert not ok.replayed


BAD_REQUESTS = [
    ("empty id", dict(context_id=""), "context_id"),
    ("space in id", dict(context_id="has space"), "context_id"),
    ("reserved leading underscore", dict(context_id="_index"), "context_id"),
    ("dot segment", dict(context_id=".."), "context_id"),
    ("slash", dict(context_id="a/b"), "context_id"),
    ("id too long", dict(context_id="a" * 129), "context_id"),
    ("negative expected_version", dict(context_id="x", expected_version=-1), "expected_version"),
    (
        "idempotency key too long",
        dict(context_id="x", idempotency_key="k" * 129),
        "idempotency_key",
    ),
    ("negative model window", dict(context_id="x", model_window=-5), "model_window"),
    ("principal too long", dict(context_id="x", principal="p" * 257), "principal"),
]


@pytest.mark.parametrize("label, fields, field", BAD_REQUESTS, ids=[t[0] for t in BAD_REQUESTS])
def test_bad_append_request_fields(ctx_sidecar, label, fields, field):
    c = ctx_sidecar.contexts
    err = rpc_error(c.AppendTurn, pb.AppendTurnRequest(messages=[user("x")], **fields))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_field(err) == field
    assert [i.id for i in list_all(c)] == ["existing", "root"]


def test_a_128_character_id_is_accepted(ctx_sidecar):
    cid = "A1._:-" + "z" * 122
    assert append(ctx_sidecar.contexts, cid, user("x")).version == 1
    assert info(ctx_sidecar.contexts, cid).id == cid


def test_other_rpcs_validate_their_input(ctx_sidecar):
    c = ctx_sidecar.contexts
    err = rpc_error(c.GetContext, pb.GetContextRequest(context_id="bad id"))
    assert (err.code(), bad_field(err)) == (grpc.StatusCode.INVALID_ARGUMENT, "context_id")
    err = rpc_error(c.GetContext, pb.GetContextRequest(context_id="existing", view=42))
    assert (err.code(), bad_field(err)) == (grpc.StatusCode.INVALID_ARGUMENT, "view")
    err = rpc_error(c.RecordUsage, pb.RecordUsageRequest(context_id="existing", input_tokens=0))
    assert (err.code(), bad_field(err)) == (grpc.StatusCode.INVALID_ARGUMENT, "input_tokens")
    err = rpc_error(
        c.RecordUsage,
        pb.RecordUsageRequest(context_id="existing", input_tokens=9, output_tokens=-1),
    )
    assert bad_field(err) == "output_tokens"
    err = rpc_error(c.ListContexts, pb.ListContextsRequest(page_size=-1))
    assert (err.code(), bad_field(err)) == (grpc.StatusCode.INVALID_ARGUMENT, "page_size")
    err = rpc_error(c.ListContexts, pb.ListContextsRequest(page_token="garbage!"))
    assert (err.code(), bad_field(err)) == (grpc.StatusCode.INVALID_ARGUMENT, "page_token")
    err = rpc_error(c.ListContexts, pb.ListContextsRequest(kind=9))
    assert (err.code(), bad_field(err)) == (grpc.StatusCode.INVALID_ARGUMENT, "kind")
    err = rpc_error(c.DeleteContext, pb.DeleteContextRequest(context_id="x y"))
    assert (err.code(), bad_field(err)) == (grpc.StatusCode.INVALID_ARGUMENT, "context_id")
    err = rpc_error(c.DeleteContext, pb.DeleteContextRequest(context_id="root"))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "root" in err.details()
    assert full(c, "existing").version == 1
