"""One result per tool call: OpenAI and Anthropic both refuse a request with
two results for one call id, so a second result is refused at AppendTurn
(within a turn or against the transcript, after a restore from sealed
segments too), while retries, reused call ids and late results of
abandoned calls keep working. Real gRPC, real LMDB."""

from __future__ import annotations

import grpc

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from tests.contexts.test_contexts import (
    append,
    assistant,
    bad_field,
    full,
    rpc_error,
    tool_text,
    user,
)

CALL = ("D1", "f", "{}")


def refused(c, cid: str, *messages: pb.Message, field: str) -> None:
    """The turn is INVALID_ARGUMENT naming ``field`` and the call id, and changes nothing."""
    before = full(c, cid)
    err = rpc_error(append, c, cid, *messages)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert bad_field(err) == field
    assert "'D1' already has its result" in err.details()
    assert full(c, cid) == before


def test_a_second_result_for_an_answered_call_is_refused(start_sidecar, store_uri_for):
    sc = start_sidecar(
        store_uri_for("lmdb"),
        contexts__checkpoint_every=2,
        contexts__cache_max_contexts=1,
    )
    c = sc.contexts
    first = append(c, "dup", user("a"), assistant("", CALL), tool_text("D1", "f", "r1"))
    refused(c, "dup", tool_text("D1", "f", "r2"), field="messages[0].tool.call_id")
    # Within one turn, too.
    refused(
        c,
        "dup",
        assistant("", CALL),
        tool_text("D1", "f", "x"),
        tool_text("D1", "f", "y"),
        field="messages[2].tool.call_id",
    )
    # A retried turn (its first idempotency key) is answered, not refused.
    retried = append(c, "dup", user("b"), assistant("", ("D2", "f", "{}")), idempotency_key="k")
    result = append(c, "dup", tool_text("D2", "f", "r"), idempotency_key="k2")
    again = append(c, "dup", tool_text("D2", "f", "r"), idempotency_key="k2")
    assert again.replayed and again.version == result.version > retried.version > first.version
    # A call id used again (providers number calls per turn) takes a result again.
    append(c, "dup", user("c"), assistant("", CALL))
    append(c, "dup", tool_text("D1", "f", "r3"))
    # Restored from sealed segments and the log (another context evicts it).
    append(c, "other", user("evicts dup"))
    refused(c, "dup", tool_text("D1", "f", "r4"), field="messages[0].tool.call_id")
    results = [m.tool.text for m in full(c, "dup").messages if m.WhichOneof("kind") == "tool"]
    assert results == ["r1", "r", "r3"]


def test_a_late_result_of_an_abandoned_call_lands_once(start_sidecar, store_uri_for):
    sc = start_sidecar(
        store_uri_for("lmdb"), compaction__open_call_max_turns=2, contexts__auto_compact=False
    )
    c = sc.contexts
    append(c, "job", user("start the export"), assistant("started", CALL))
    for i in range(4):
        append(c, "job", user(f"meanwhile {i}"), assistant(f"answer {i}"))
    r = c.Compact(pb.CompactRequest(context_id="job", keep_last=2), timeout=30)
    assert r.compacted and any("D1" in item for item in r.summary.open)
    # Two late results in one turn: the second is refused.
    refused(
        c,
        "job",
        tool_text("D1", "f", "x"),
        tool_text("D1", "f", "y"),
        field="messages[1].tool.call_id",
    )
    late = append(c, "job", tool_text("D1", "f", "rows: 42"))
    assert len(late.message_ids) == 2  # the call restated before its result
    refused(c, "job", tool_text("D1", "f", "again"), field="messages[0].tool.call_id")
