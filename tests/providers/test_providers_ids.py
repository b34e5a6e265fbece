"""Tool-call ids that runtimes really send: reused every round (``call0``)
and from other providers (``functions.Bash:0``, ``call|2``). Conversations
with them compact again and again; provider reads carry ids the provider
accepts, unique in the request and the same on every read; a mapped id the
runtime sends back is stored as the original. Over real gRPC."""

from __future__ import annotations

import json

import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.core.providers.ids import ANTHROPIC_ID, mapped, original
from tests.providers.test_providers import check_anthropic, check_openai

OPENAI, ANTHROPIC, CTXD = (
    pb.MESSAGE_FORMAT_OPENAI,
    pb.MESSAGE_FORMAT_ANTHROPIC,
    pb.MESSAGE_FORMAT_CTXD,
)


@pytest.fixture
def sc(start_sidecar, tmp_path):
    return start_sidecar(f"lmdb://{tmp_path / 'ids'}", contexts__auto_compact=False).contexts


def append(ctx, cid, items, **kw):
    return ctx.AppendTurn(
        pb.AppendTurnRequest(context_id=cid, messages_json=json.dumps(items), format=OPENAI, **kw)
    )


def round_(ctx, cid, ids, i):
    calls = [
        {"id": c, "type": "function", "function": {"name": "sh", "arguments": "{}"}} for c in ids
    ]
    append(
        ctx,
        cid,
        [
            {"role": "user", "content": f"step {i}"},
            {"role": "assistant", "content": None, "tool_calls": calls},
            *({"role": "tool", "tool_call_id": c, "content": f"out {i}"} for c in ids),
            {"role": "assistant", "content": f"did {i}"},
        ],
    )


def read(ctx, cid, fmt, **kw):
    r = ctx.GetContext(
        pb.GetContextRequest(context_id=cid, view=pb.CONTEXT_VIEW_SLICE, format=fmt, **kw)
    )
    return r, json.loads(r.messages_json), json.loads(r.system_json or "[]")


def call_ids(fmt, messages):
    if fmt == OPENAI:
        return [c["id"] for m in messages for c in m.get("tool_calls") or ()]
    return [b["id"] for m in messages for b in m["content"] if b["type"] == "tool_use"]


def test_reused_ids_compact_every_time_and_reads_stay_valid(sc):
    """Ids numbered per response (call0, call1 in every round) never block a
    compaction, by Compact or by PlanCompaction/ApplyCompaction."""
    for i in range(24):
        round_(sc, "reuse", ["call0", "call1"], i)
        if i % 4 == 3:
            r = sc.Compact(pb.CompactRequest(context_id="reuse", keep_last=4))
            assert r.compacted, r.reason
        if i % 8 == 5:
            p = sc.PlanCompaction(pb.PlanCompactionRequest(context_id="reuse", keep_last=4))
            assert not p.nothing_to_do, p.reason
            sc.ApplyCompaction(
                pb.ApplyCompactionRequest(
                    context_id="reuse", plan_ref=p.plan_ref, answer='{"facts":["ran sh"]}'
                )
            )
        _, messages, _ = read(sc, "reuse", OPENAI)
        check_openai(messages)
        ids = call_ids(OPENAI, messages)
        assert len(ids) == len(set(ids)), ids
        _, messages, system = read(sc, "reuse", ANTHROPIC)
        check_anthropic(system, messages)
        ids = call_ids(ANTHROPIC, messages)
        assert len(ids) == len(set(ids)) and all(ANTHROPIC_ID.fullmatch(c) for c in ids), ids


def test_foreign_ids_are_mapped_for_anthropic_and_come_back_as_sent(sc):
    for i in range(3):
        round_(sc, "foreign", ["functions.Bash:0", "call|2"], i)
    append(
        sc,
        "foreign",
        [
            {"role": "user", "content": "once more"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "functions.Bash:0",
                        "type": "function",
                        "function": {"name": "sh", "arguments": "{}"},
                    }
                ],
            },
        ],
    )
    first, messages, system = read(sc, "foreign", ANTHROPIC)
    check_anthropic(system, messages)
    ids = call_ids(ANTHROPIC, messages)
    assert len(ids) == 7 == len(set(ids)) and all(ANTHROPIC_ID.fullmatch(c) for c in ids)
    # The same on every read: the prefix a provider cached stays byte-identical.
    again = read(sc, "foreign", ANTHROPIC)[0]
    assert again.messages_json == first.messages_json
    # OpenAI accepts the ids as sent; only the repeats are mapped.
    openai_ids = call_ids(OPENAI, read(sc, "foreign", OPENAI)[1])
    assert openai_ids[:2] == ["functions.Bash:0", "call|2"] and len(set(openai_ids)) == 7
    # The runtime answers the open call with the id it read: stored as sent first.
    pending = ids[-1]
    assert pending != "functions.Bash:0" and original(pending) == "functions.Bash:0"
    sc.AppendTurn(
        pb.AppendTurnRequest(
            context_id="foreign",
            format=ANTHROPIC,
            messages_json=json.dumps(
                [
                    {
                        "role": "user",
                        "content": [
                            {"type": "tool_result", "tool_use_id": pending, "content": "ok"}
                        ],
                    }
                ]
            ),
        )
    )
    full = sc.GetContext(pb.GetContextRequest(context_id="foreign", view=pb.CONTEXT_VIEW_FULL))
    assert full.context.messages[-1].tool.call_id == "functions.Bash:0"
    after = read(sc, "foreign", ANTHROPIC)[1]
    assert after[: len(messages)] == messages and len(after) == len(messages) + 1


def test_mapped_ids_round_trip_and_are_never_taken_for_kept_ones():
    for kept in ("call0", "functions.Bash:0", "call|2", "ctxd5x0_Y2FsbDA", "é"):
        out = mapped(kept, 12, 3)
        assert ANTHROPIC_ID.fullmatch(out) and original(out) == kept
    assert original("ctxd5x0_notbase64!") == "ctxd5x0_notbase64!"
    assert original("call0") == "call0"


def test_a_re_cut_json_page_keeps_the_incarnation(sc):
    """A ctxd-JSON page too large as JSON is read again smaller; a conversation
    deleted and created again still comes back as REPLACE, whole."""
    big = "\x01" * (400 * 1024)  # 2.4 MB as JSON: two do not fit one reply
    for i in range(3):
        append(sc, "recut", [{"role": "user", "content": f"{i}{big}"}])
    held = read(sc, "recut", CTXD)[0]
    sc.DeleteContext(pb.DeleteContextRequest(context_id="recut"))
    for i in range(5):
        append(sc, "recut", [{"role": "user", "content": f"new {i}{big}"}])
    r = sc.GetContext(
        pb.GetContextRequest(
            context_id="recut",
            view=pb.CONTEXT_VIEW_SLICE,
            format=CTXD,
            since_version=held.info.version,
            since_incarnation=held.info.incarnation,
        )
    )
    assert r.change == pb.SLICE_CHANGE_REPLACE
    assert json.loads(r.messages_json)[0]["user"]["text"].startswith("new 0")
