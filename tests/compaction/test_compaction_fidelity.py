"""Compaction that never breaks the model call and forgets nothing that
matters, over real gRPC on LMDB and S3 (moto server): open tool calls pin the
cut, abandoned ones keep accepting a late result, long agentic runs are cut
between whole rounds, and the verbatim artifact ledger carries the paths,
commands, URLs and ids of folded messages into the slice."""

from __future__ import annotations

import json
import time
from pathlib import Path

import grpc
import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from tests.compaction.test_compaction_rpcs import append, assistant, openai_settings, tool, user
from tests.contexts.test_contexts import bad_field
from tests.support.fake_openai import FakeOpenAI

TRANSCRIPT = Path(__file__).parents[2] / "bench" / "transcripts" / "ops_session.json"


@pytest.fixture(params=["lmdb", "s3"])
def uri(request, store_uri_for) -> str:
    return store_uri_for(request.param)


def compact(sc, cid: str, **kw) -> pb.CompactResponse:
    return sc.contexts.Compact(pb.CompactRequest(context_id=cid, **kw), timeout=30)


def the_slice(sc, cid: str) -> list[pb.Message]:
    req = pb.GetContextRequest(context_id=cid, view=pb.CONTEXT_VIEW_SLICE)
    return list(sc.contexts.GetContext(req).slice)


def assert_results_follow_their_calls(msgs: list[pb.Message]) -> None:
    """What both providers require: every tool result comes after the call it answers."""
    called: set[str] = set()
    for m in msgs:
        kind = m.WhichOneof("kind")
        if kind == "assistant":
            called.update(c.id for c in m.assistant.tool_calls)
        elif kind == "tool":
            assert m.tool.call_id in called, f"result {m.tool.call_id} before its call"


def slice_text(msgs: list[pb.Message]) -> str:
    out = []
    for m in msgs:
        kind = m.WhichOneof("kind")
        body = getattr(m, kind)
        if kind == "tool":
            out.append(body.json or body.text)
        else:
            out.append(body.text)
            out.extend(c.arguments_json for c in getattr(body, "tool_calls", ()))
    return "\n".join(out)


# -- open calls ----------------------------------------------------------------------------------
def test_an_open_call_is_never_folded_and_its_late_result_lands(start_sidecar, uri):
    sc = start_sidecar(uri)
    append(sc, "job", user("start the export"), assistant("started", ("job-1", "export")))
    for i in range(5):
        append(sc, "job", user(f"meanwhile {i}"), assistant(f"answer {i}"))
    r = compact(sc, "job", keep_last=2)
    # Folding anything would fold the call that still waits for its result.
    assert not r.compacted and "job-1" in r.reason, r.reason
    append(sc, "job", tool("job-1", "export", {"rows": 42}), assistant("export done"))
    r = compact(sc, "job", keep_last=2)
    assert r.compacted
    assert_results_follow_their_calls(the_slice(sc, "job"))


def test_an_abandoned_call_is_folded_and_still_takes_a_late_result(start_sidecar, uri):
    sc = start_sidecar(uri, compaction__open_call_max_turns=2)
    append(sc, "job", user("start the export"), assistant("started", ("job-1", "export")))
    for i in range(4):
        append(sc, "job", user(f"meanwhile {i}"), assistant(f"answer {i}"))
    r = compact(sc, "job", keep_last=2)
    assert r.compacted, r.reason
    assert any("job-1" in item and "abandoned" in item for item in r.summary.open)
    # The result arrives after all: accepted, and its call is restated before it.
    resp = append(sc, "job", tool("job-1", "export", {"rows": 42}))
    assert len(resp.message_ids) == 2
    msgs = the_slice(sc, "job")
    assert_results_follow_their_calls(msgs)
    restated, result = msgs[-2], msgs[-1]
    assert [c.id for c in restated.assistant.tool_calls] == ["job-1"]
    assert restated.assistant.tool_calls[0].name == "export"
    assert result.tool.call_id == "job-1" and json.loads(result.tool.json) == {"rows": 42}
    # Once answered it is an ordinary call: a second result is refused as before.
    with pytest.raises(grpc.RpcError) as err:
        append(sc, "job", tool("job-2", "export", {}))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_a_late_result_between_plan_and_apply_aborts_the_apply(start_sidecar, uri):
    """The plan folds an abandoned call; its result lands before the apply.
    Folding the call now would leave the result without it (both providers
    refuse that), so the apply is ABORTED and nothing changes; a new plan
    keeps the call with its result."""
    sc = start_sidecar(uri, compaction__open_call_max_turns=2, contexts__auto_compact=False)
    append(sc, "job", user("start the export"), assistant("started", ("job-1", "export")))
    for i in range(4):
        append(sc, "job", user(f"meanwhile {i}"), assistant(f"answer {i}"))
    plan = sc.contexts.PlanCompaction(pb.PlanCompactionRequest(context_id="job", keep_last=2))
    assert plan.fold_count > 0
    append(sc, "job", tool("job-1", "export", {"rows": 42}))
    before = sc.contexts.GetContext(pb.GetContextRequest(context_id="job")).context
    apply = pb.ApplyCompactionRequest(
        context_id="job", plan_ref=plan.plan_ref, answer='{"facts": ["export started"]}'
    )
    with pytest.raises(grpc.RpcError) as err:
        sc.contexts.ApplyCompaction(apply, timeout=10)
    assert err.value.code() == grpc.StatusCode.ABORTED
    assert "job-1" in err.value.details() and "plan again" in err.value.details()
    after = sc.contexts.GetContext(pb.GetContextRequest(context_id="job")).context
    assert after.version == before.version and len(after.messages) == len(before.messages)
    r = compact(sc, "job", keep_last=2)
    assert r.compacted, r.reason
    assert_results_follow_their_calls(the_slice(sc, "job"))


def test_a_long_agentic_run_is_cut_between_whole_rounds(start_sidecar, uri):
    sc = start_sidecar(uri, contexts__auto_compact=False)
    append(sc, "run", user("migrate every table"))
    big = "r" * 200_000
    for i in range(18):
        append(
            sc,
            "run",
            assistant(f"table {i}", (f"t{i}", "migrate")),
            tool(f"t{i}", "migrate", {"table": i, "log": big}),
        )
    r = compact(sc, "run", keep_last=4)
    assert r.compacted, r.reason
    msgs = the_slice(sc, "run")
    assert_results_follow_their_calls(msgs)
    first = next(m for m in msgs if m.WhichOneof("kind") != "system")
    assert first.WhichOneof("kind") == "assistant" and first.assistant.tool_calls


# -- the artifact ledger ---------------------------------------------------------------------------
def _pb(d: dict) -> pb.Message:
    if d["kind"] == "user":
        return pb.Message(user=pb.UserMessage(text=d["text"]))
    if d["kind"] == "assistant":
        calls = [pb.ToolCall(**c) for c in d.get("tool_calls", ())]
        return pb.Message(assistant=pb.AssistantMessage(text=d.get("text", ""), tool_calls=calls))
    t = pb.ToolResult(call_id=d["call_id"], name=d["name"], is_error=d.get("is_error", False))
    t.json = d["content"]
    return pb.Message(tool=t)


def recall(expected: list[dict], text: str) -> float:
    wanted = {v for row in expected for v in row.values()}
    return sum(w in text for w in wanted) / len(wanted)


def test_folded_artifacts_reach_the_slice(start_sidecar, uri):
    data = json.loads(TRANSCRIPT.read_text())
    sc = start_sidecar(uri)
    rounds, expected = data["rounds"], data["expected"]
    base = data["base_rounds"]
    batches = [range(0, base), range(base, base + 5), range(base + 5, base + 10)]
    goals = [0.95, 0.90, 0.90]
    for batch, goal in zip(batches, goals, strict=True):
        for i in batch:
            append(sc, "ops", *[_pb(d) for d in rounds[i]])
        r = compact(sc, "ops", keep_last=4)
        assert r.compacted, r.reason
        seen = expected[: batch.stop]
        got = recall(seen, slice_text(the_slice(sc, "ops")))
        assert got >= goal, f"{got:.1%} of the artifacts after {batch.stop} rounds"


def test_a_model_answer_cannot_drop_the_ledger(start_sidecar, store_uri_for):
    with FakeOpenAI() as server:
        # The model returns a summary with none of the artifacts in it.
        server.answer = json.dumps({"goals": ["fix billing"], "facts": [], "open": []})
        sc = start_sidecar(store_uri_for("lmdb"), **openai_settings(server))
        append(
            sc,
            "ops",
            user("look at src/billing/handlers.py and https://grafana.example.com/d/b?x=1"),
            assistant("", ("c1", "run_shell")),
        )
        sc.contexts.AppendTurn(
            pb.AppendTurnRequest(
                context_id="ops",
                messages=[
                    tool("c1", "run_shell", {"stdout": "HTTP 503 for order 7310000"}),
                    assistant("done"),
                ],
            )
        )
        for i in range(3):
            append(sc, "ops", user(f"more {i}"), assistant(f"ok {i}"))
        r = compact(sc, "ops", keep_last=2)
        assert r.compacted, r.reason
        text = slice_text(the_slice(sc, "ops"))
        for artifact in (
            "src/billing/handlers.py",
            "https://grafana.example.com/d/b?x=1",
            "7310000",
            "HTTP 503",
        ):
            assert artifact in text, artifact


# -- one JSON rule ---------------------------------------------------------------------------------
def test_deep_json_is_refused_at_the_door_naming_field_and_limit(start_sidecar, uri):
    sc = start_sidecar(uri)
    append(sc, "deep", user("go"), assistant("", ("c1", "t")))
    deep = "[" * 980 + "]" * 980
    req = pb.AppendTurnRequest(
        context_id="deep",
        messages=[pb.Message(tool=pb.ToolResult(call_id="c1", name="t", json=deep))],
    )
    with pytest.raises(grpc.RpcError) as err:
        sc.contexts.AppendTurn(req)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_field(err.value) == "messages[0].tool.json"
    assert "64" in err.value.details()
    args = pb.ToolCall(id="c2", name="t", arguments_json=deep)
    with pytest.raises(grpc.RpcError) as err:
        sc.contexts.AppendTurn(
            pb.AppendTurnRequest(
                context_id="deep",
                messages=[pb.Message(assistant=pb.AssistantMessage(tool_calls=[args]))],
            )
        )
    assert bad_field(err.value) == "messages[0].assistant.tool_calls[0].arguments_json"


def test_a_huge_integer_is_treated_alike_everywhere(start_sidecar, uri):
    from ctxd_sidecar.api.ctxd.v1 import memory_pb2 as mpb

    sc = start_sidecar(uri)
    n = "9" * 5000
    append(sc, "big", user("count"), assistant("", ("c1", "count")))
    calls = [pb.ToolCall(id="c2", name="count", arguments_json=f'{{"n": {n}}}')]
    sc.contexts.AppendTurn(
        pb.AppendTurnRequest(
            context_id="big",
            messages=[
                pb.Message(tool=pb.ToolResult(call_id="c1", name="count", json=f'{{"n": {n}}}')),
                pb.Message(assistant=pb.AssistantMessage(tool_calls=calls)),
                pb.Message(tool=pb.ToolResult(call_id="c2", name="count", json=n)),
                pb.Message(assistant=pb.AssistantMessage(text="counted")),
            ],
        )
    )
    sc.contexts.SetPreflight(pb.SetPreflightRequest(context_id="big", verdict_json=f'{{"n": {n}}}'))
    assert sc.memory.Set(mpb.SetRequest(key="big", value_json=n)).record.value_json == n
    for i in range(3):
        append(sc, "big", user(f"more {i}"), assistant(f"ok {i}"))
    plan = sc.contexts.PlanCompaction(pb.PlanCompactionRequest(context_id="big", keep_last=2))
    assert not plan.nothing_to_do and n[:100] in plan.excerpt
    assert compact(sc, "big", keep_last=2).compacted


def test_the_automatic_trigger_compacts_a_long_agentic_run(start_sidecar, uri):
    sc = start_sidecar(uri, contexts__default_model_window=20_000)
    append(sc, "run", user("migrate every table"))
    for i in range(12):
        append(
            sc,
            "run",
            assistant(f"table {i}", (f"t{i}", "migrate")),
            tool(f"t{i}", "migrate", {"table": i, "log": "r" * 8_000}),
        )
    req = pb.GetContextRequest(context_id="run", view=pb.CONTEXT_VIEW_INFO)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if sc.contexts.GetContext(req).info.est_tokens < 0.7 * 20_000:
            break
        time.sleep(0.2)
    msgs = the_slice(sc, "run")
    assert msgs[0].system.text.startswith("Summary of earlier conversation:")
    assert_results_follow_their_calls(msgs)
