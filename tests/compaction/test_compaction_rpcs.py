"""Compaction over gRPC on LMDB and S3 (moto): PlanCompaction cut rules,
ApplyCompaction merges and conflicts, Compact with summariser plugins (the
fake OpenAI-compatible server and the extractive fallback), restarts, and the
automatic trigger with its back-off."""

from __future__ import annotations

import json
import queue
import threading
import time

import grpc
import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from tests.contexts.test_contexts import bad_field
from tests.support.fake_openai import FakeOpenAI

BACKENDS = ["lmdb", "s3"]


@pytest.fixture(params=BACKENDS)
def uri(request, store_uri_for) -> str:
    return store_uri_for(request.param)


# -- message builders --------------------------------------------------------------------
def user(text: str) -> pb.Message:
    return pb.Message(user=pb.UserMessage(text=text))


def assistant(text: str = "", *calls: tuple[str, str]) -> pb.Message:
    return pb.Message(
        assistant=pb.AssistantMessage(
            text=text,
            tool_calls=[pb.ToolCall(id=cid, name=name, arguments_json="{}") for cid, name in calls],
        )
    )


def tool(call_id: str, name: str, result: dict) -> pb.Message:
    return pb.Message(tool=pb.ToolResult(call_id=call_id, name=name, json=json.dumps(result)))


def append(sc, cid: str, *msgs: pb.Message, **kw) -> pb.AppendTurnResponse:
    return sc.contexts.AppendTurn(pb.AppendTurnRequest(context_id=cid, messages=msgs, **kw))


def tool_turn(sc, cid: str, i: int, size: int = 0) -> None:
    """user → assistant with a call → tool result → assistant: 4 messages."""
    pad = " lorem" * size
    append(
        sc,
        cid,
        user(f"task {i}{pad}"),
        assistant("", (f"c{i}", "square")),
        tool(f"c{i}", "square", {"n": i, "sq": i * i}),
        assistant(f"{i} squared is {i * i}{pad}"),
    )


def plan(sc, cid: str, **kw) -> pb.PlanCompactionResponse:
    return sc.contexts.PlanCompaction(pb.PlanCompactionRequest(context_id=cid, **kw))


def apply(sc, cid: str, ref: str, answer) -> pb.ApplyCompactionResponse:
    if not isinstance(answer, str):
        answer = json.dumps(answer)
    return sc.contexts.ApplyCompaction(
        pb.ApplyCompactionRequest(context_id=cid, plan_ref=ref, answer=answer)
    )


def get(sc, cid: str, view=pb.CONTEXT_VIEW_FULL) -> pb.GetContextResponse:
    return sc.contexts.GetContext(pb.GetContextRequest(context_id=cid, view=view))


def ids(sc, cid: str) -> list[str]:
    return [m.id for m in get(sc, cid).context.messages]


def rpc_error(fn, *args) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        fn(*args)
    return info.value


# -- cut rules ------------------------------------------------------------------------------
def test_cut_keeps_last_and_starts_kept_window_with_a_user_message(start_sidecar, uri):
    sc = start_sidecar(uri)
    for i in range(3):
        tool_turn(sc, "cuts", i)  # users at m1, m5, m9
    p = plan(sc, "cuts", keep_last=5)  # 12 - 5 = 7 → nearest earlier user cut: 4
    assert not p.nothing_to_do
    assert (p.fold_count, p.fold_through_message_id) == (4, "m4")
    assert p.base_version == 3
    assert p.tokens_before == get(sc, "cuts", pb.CONTEXT_VIEW_INFO).info.est_tokens
    assert "[m1 user" in p.excerpt and "[m4 assistant" in p.excerpt and "[m5" not in p.excerpt
    assert "square#c0" in p.excerpt  # tool call ids verbatim
    assert json.loads(p.answer_schema_json)["properties"]["facts"]["type"] == "array"
    assert p.system_prompt
    p = plan(sc, "cuts", keep_last=4)
    assert (p.fold_count, p.fold_through_message_id) == (8, "m8")
    p = plan(sc, "cuts")  # default keep_last 12 keeps all 12
    assert p.nothing_to_do and "keep_last=12" in p.reason


def test_cut_never_separates_a_tool_round(start_sidecar, uri):
    sc = start_sidecar(uri)
    # m1 user, m2 assistant calls c1, m3 user interjects, m4 result of c1,
    # m5 assistant, m6 user, m7 assistant
    append(sc, "round", user("start"), assistant("", ("c1", "fetch")))
    append(sc, "round", user("still there?"))
    append(sc, "round", tool("c1", "fetch", {"ok": True}), assistant("fetched"))
    append(sc, "round", user("next"), assistant("done"))
    # Candidates m4 (a result), m3 (inside the c1 round): invalid. With no user
    # message to cut at, the cut falls between whole rounds: before m2.
    p = plan(sc, "round", keep_last=4)
    assert (p.nothing_to_do, p.fold_count, p.fold_through_message_id) == (False, 1, "m1")
    p = plan(sc, "round", keep_last=2)  # m6 is a user message after the round
    assert (p.nothing_to_do, p.fold_count) == (False, 5)


def test_cut_falls_between_tool_rounds_in_one_long_agent_turn(start_sidecar, uri):
    sc = start_sidecar(uri)
    append(
        sc,
        "agent",
        user("go"),
        assistant("", ("a", "t")),
        tool("a", "t", {}),
        assistant("", ("b", "t")),
        tool("b", "t", {}),
        assistant("finished"),
    )
    p = plan(sc, "agent", keep_last=2)
    # m4 (calls b) opens the kept window; its result m5 stays with it.
    assert (p.nothing_to_do, p.fold_count, p.fold_through_message_id) == (False, 3, "m3")
    p = plan(sc, "agent", keep_last=6)
    assert p.nothing_to_do and "keep_last" in p.reason


def test_target_tokens_folds_more_but_keeps_two(start_sidecar, uri):
    sc = start_sidecar(uri)
    for i in range(4):
        tool_turn(sc, "target", i, size=200)  # ~300 tokens per turn
    assert plan(sc, "target", keep_last=8).fold_count == 8
    p = plan(sc, "target", keep_last=8, target_tokens=400)
    # The last turn does not fit, its last tool round (call, result, answer) does.
    assert p.fold_count == 13
    # Nothing fits: fold what the rules allow, preferring a user boundary.
    p = plan(sc, "target", keep_last=8, target_tokens=1)
    assert p.fold_count == 12


def test_plan_rejects_bad_input(start_sidecar, uri):
    sc = start_sidecar(uri)
    err = rpc_error(plan, sc, "missing")
    assert err.code() == grpc.StatusCode.NOT_FOUND
    tool_turn(sc, "bad", 0)
    err = rpc_error(lambda: plan(sc, "bad", keep_last=-1))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and bad_field(err) == "keep_last"
    err = rpc_error(lambda: plan(sc, "bad", target_tokens=-5))
    assert bad_field(err) == "target_tokens"
    err = rpc_error(lambda: plan(sc, "bad/x"))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT


# -- apply and merge ----------------------------------------------------------------------------
def test_three_compactions_merge_field_by_field(start_sidecar, uri):
    sc = start_sidecar(uri, compaction__list_cap=3)
    answers = [
        {
            "goals": ["square numbers"],
            "decisions": ["use the square tool"],
            "open": ["q1"],
            "facts": ["0 squared is 0", "1 squared is 1"],
        },
        {
            "goals": ["Square numbers."],
            "decisions": [],
            "open": ["q2"],
            "facts": ["2 squared is 4", "3 squared is 9"],
        },
        "Plain text: the user moved on to cubes.",
    ]
    covered = 0
    version = 0
    for round_, answer in enumerate(answers):
        for i in range(2):
            tool_turn(sc, "merge", round_ * 2 + i, size=50)
        p = plan(sc, "merge", keep_last=2)
        assert not p.nothing_to_do
        if round_ > 0:
            assert "square numbers" in p.excerpt  # previous summary shown to extend
        before_ids = ids(sc, "merge")
        r = apply(sc, "merge", p.plan_ref, answer)
        assert r.folded == p.fold_count
        assert r.version == p.base_version + 1
        version = r.version
        covered += r.folded
        assert r.tokens_after < r.tokens_before
        info = get(sc, "merge", pb.CONTEXT_VIEW_INFO).info
        assert info.version == r.version and info.est_tokens == r.tokens_after
        assert ids(sc, "merge") == before_ids[r.folded :]
    s = get(sc, "merge").context.summary
    assert list(s.goals) == ["square numbers"]  # deduped case/punctuation-insensitively
    assert list(s.decisions) == ["use the square tool"]
    assert list(s.open) == ["q1", "q2"]
    assert list(s.facts) == ["1 squared is 1", "2 squared is 4", "3 squared is 9"]  # cap 3
    assert s.narrative == "Plain text: the user moved on to cubes."
    assert s.covers_messages == covered
    assert r.summary == s
    slice_ = get(sc, "merge", pb.CONTEXT_VIEW_SLICE).slice
    assert slice_[0].id == "summary" and "square numbers" in slice_[0].system.text
    assert version == 9  # six turns + three compactions


def test_apply_aborts_only_when_the_folded_prefix_changed(start_sidecar, uri):
    sc = start_sidecar(uri)
    for i in range(4):
        tool_turn(sc, "race", i)
    first = plan(sc, "race", keep_last=4)
    second = plan(sc, "race", keep_last=8)
    apply(sc, "race", first.plan_ref, {"facts": ["a"]})
    err = rpc_error(apply, sc, "race", second.plan_ref, {"facts": ["b"]})
    assert err.code() == grpc.StatusCode.ABORTED
    err = rpc_error(apply, sc, "race", first.plan_ref, {"facts": ["a"]})  # already applied
    assert err.code() == grpc.StatusCode.ABORTED
    # Turns appended between plan and apply are kept.
    tool_turn(sc, "race", 5)
    p = plan(sc, "race", keep_last=2)
    assert p.fold_count == 4
    tool_turn(sc, "race", 9)
    before = ids(sc, "race")
    r = apply(sc, "race", p.plan_ref, {"facts": ["c"]})
    assert r.folded == p.fold_count
    assert ids(sc, "race") == before[p.fold_count :]
    assert before[-4:] == ids(sc, "race")[-4:]
    assert list(get(sc, "race").context.summary.facts) == ["a", "c"]
    # A context deleted and created again: old plans do not apply.
    tool_turn(sc, "race", 10)
    p = plan(sc, "race", keep_last=2)
    assert not p.nothing_to_do
    sc.contexts.DeleteContext(pb.DeleteContextRequest(context_id="race"))
    for i in range(3):
        tool_turn(sc, "race", i)
    err = rpc_error(apply, sc, "race", p.plan_ref, {"facts": ["x"]})
    assert err.code() == grpc.StatusCode.ABORTED


def test_apply_evicts_skills_the_kept_window_no_longer_references(start_sidecar, uri):
    sc = start_sidecar(uri)
    append(sc, "sk", user("use @skill:alpha and @skill:beta"), assistant("ok"))
    handle = sc.extra["handle"]
    service = sc.extra["sidecar"].domain.contexts

    def load(st):
        return {"op": "skills", "refs": [["alpha", "a" * 64], ["beta", "b" * 64]]}

    handle.call(service.change("sk", load, event="skills"))
    append(sc, "sk", user("now only @skill:beta matters"), assistant("fine"))
    p = plan(sc, "sk", keep_last=2)
    r = apply(sc, "sk", p.plan_ref, {"facts": ["skills were loaded"]})
    assert list(r.evicted_skills) == ["alpha"]
    assert [s.name for s in get(sc, "sk").context.skills] == ["beta"]
    sc.extra["handle"].close()
    assert [s.name for s in get(start_sidecar(uri), "sk").context.skills] == ["beta"]


def test_apply_rejects_bad_input_without_harm(start_sidecar, uri):
    sc = start_sidecar(uri)
    for i in range(3):
        tool_turn(sc, "bad", i)
    p = plan(sc, "bad", keep_last=2)
    before = get(sc, "bad")
    for ref, answer, field in [
        ("nonsense", "{}", "plan_ref"),
        ("cp1.!!!", "ok", "plan_ref"),
        (p.plan_ref, "", "answer"),
        (p.plan_ref, '{"goals": [', "answer"),
        (p.plan_ref, '{"unrelated": 1}', "answer"),
    ]:
        err = rpc_error(apply, sc, "bad", ref, answer)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (ref, answer)
        assert bad_field(err) == field
    assert get(sc, "bad") == before
    assert apply(sc, "bad", p.plan_ref, "fine").folded == p.fold_count


def test_restart_after_compaction_restores_the_same_record(start_sidecar, uri):
    sc = start_sidecar(uri, contexts__checkpoint_every=1000)
    for i in range(5):
        tool_turn(sc, "durable", i)
    p = plan(sc, "durable", keep_last=4)
    apply(sc, "durable", p.plan_ref, {"goals": ["g"], "facts": ["f"]})
    tool_turn(sc, "durable", 7)
    p = plan(sc, "durable", keep_last=4)
    apply(sc, "durable", p.plan_ref, "narrative text")
    tool_turn(sc, "durable", 8)  # after the last checkpoint: replayed from the log
    before = get(sc, "durable")
    sc.extra["handle"].close()
    again = start_sidecar(uri)
    after = get(again, "durable")
    assert after == before
    assert after.context.summary.covers_messages == 20


@pytest.mark.parametrize("backend", BACKENDS)
def test_compaction_replays_from_the_log_after_kill(spawn_sidecar, store_uri_for, backend):
    args = ("--store", store_uri_for(backend), "--set", "contexts.checkpoint_every=1000")
    sc = spawn_sidecar(*args).running()
    for i in range(5):
        tool_turn(sc, "crash", i, size=20)
    p = plan(sc, "crash", keep_last=4)
    apply(sc, "crash", p.plan_ref, {"decisions": ["d"], "open": ["o"]})
    tool_turn(sc, "crash", 6)
    before = get(sc, "crash")
    sc.stop()  # kill -9: the compact record is only in the log
    again = spawn_sidecar(*args).running()
    assert get(again, "crash") == before
    assert ids(again, "crash")[0] == "m17"


# -- Compact with summariser plugins -----------------------------------------------------------
@pytest.fixture
def fake_openai():
    with FakeOpenAI() as server:
        yield server


def openai_settings(server: FakeOpenAI, **extra) -> dict:
    return {
        "compaction__summariser": "openai",
        "summariser__openai__base_url": server.base_url,
        "summariser__openai__model": "fake-model",
        "summariser__openai__max_retries": 0,
        "summariser__openai__timeout": 1.0,
        **extra,
    }


def compact(sc, cid: str, **kw) -> pb.CompactResponse:
    return sc.contexts.Compact(pb.CompactRequest(context_id=cid, **kw))


def test_compact_with_openai_compatible_server(start_sidecar, uri, fake_openai):
    sc = start_sidecar(uri, **openai_settings(fake_openai))
    for i in range(4):
        tool_turn(sc, "oa", i)
    r = compact(sc, "oa", keep_last=4, instructions="keep numbers")
    assert r.compacted and r.summariser == "openai"
    assert r.folded == 12 and r.tokens_after < r.tokens_before
    assert list(r.summary.facts) == ["covered m1..m12", "12 entries"]
    assert "keep numbers" in fake_openai.requests[-1].system
    assert ids(sc, "oa") == ["m13", "m14", "m15", "m16"]
    # Malformed answer: nothing changes.
    for i in range(4, 8):
        tool_turn(sc, "oa", i)
    before = get(sc, "oa")
    fake_openai.mode = "malformed"
    err = rpc_error(lambda: compact(sc, "oa", keep_last=4))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert get(sc, "oa") == before
    # Timeout: UNAVAILABLE, nothing changes.
    fake_openai.mode, fake_openai.delay = "slow", 3.0
    err = rpc_error(lambda: compact(sc, "oa", keep_last=4))
    assert err.code() == grpc.StatusCode.UNAVAILABLE
    assert get(sc, "oa") == before
    # Nothing to do is an answer, not an error.
    r = compact(sc, "oa", keep_last=100)
    assert not r.compacted and r.reason


def test_compact_with_the_extractive_fallback_and_unknown_summariser(start_sidecar, uri):
    sc = start_sidecar(uri)
    for i in range(3):
        tool_turn(sc, "ex", i)
    err = rpc_error(lambda: compact(sc, "ex", summariser="nope"))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and bad_field(err) == "summariser"
    r = compact(sc, "ex", keep_last=4)
    assert r.compacted and r.summariser == "extractive" and r.folded == 8
    assert r.summary.goals and r.summary.facts
    slice_ = get(sc, "ex", pb.CONTEXT_VIEW_SLICE).slice
    assert slice_[0].id == "summary" and slice_[1].id == "m9"


# -- automatic trigger ------------------------------------------------------------------------
class Watcher:
    """Reads a WatchContext stream in a thread."""

    def __init__(self, sc, cid: str) -> None:
        self.events: queue.Queue = queue.Queue()
        feed = sc.extra["sidecar"].domain.contexts.feed
        known = feed.watchers(cid)
        self.call = sc.contexts.WatchContext(pb.WatchContextRequest(context_id=cid))
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while feed.watchers(cid) <= known:
            assert time.monotonic() < deadline, "watch did not start"
            time.sleep(0.01)

    def _read(self) -> None:
        try:
            for ev in self.call:
                self.events.put(ev)
        except grpc.RpcError as exc:
            self.events.put(exc)
        self.events.put(None)

    def next(self, kind=None, timeout: float = 20):
        """The next event (of ``kind``, skipping others)."""
        deadline = time.monotonic() + timeout
        while True:
            ev = self.events.get(timeout=max(0.01, deadline - time.monotonic()))
            if ev is None or isinstance(ev, Exception) or kind is None or ev.kind == kind:
                return ev

    def close(self) -> None:
        self.call.cancel()
        self.thread.join(5)


def big_turn(sc, cid: str, i: int) -> pb.AppendTurnResponse:
    return append(
        sc,
        cid,
        user(f"question {i} " + "x" * 400),
        assistant(f"answer {i} " + "y" * 400),
        model_window=1000,
    )


def test_automatic_compaction_runs_after_the_turn(start_sidecar, uri):
    sc = start_sidecar(uri, contexts__keep_last=2)
    big_turn(sc, "auto", 0)
    w = Watcher(sc, "auto")
    due = [big_turn(sc, "auto", i).compaction_due for i in range(1, 6)]
    assert any(due)  # ~210 tokens a turn; due past 0.7 x 1000
    ev = w.next(pb.CONTEXT_EVENT_KIND_COMPACTION)
    assert ev.folded > 0 and ev.tokens_after < ev.tokens_before
    w.close()
    assert ev.tokens_after <= 0.7 * 1000
    assert get(sc, "auto").context.summary.covers_messages >= ev.folded


def test_automatic_compaction_can_be_switched_off(start_sidecar, uri):
    sc = start_sidecar(uri, contexts__keep_last=2, contexts__auto_compact=False)
    for i in range(8):
        big_turn(sc, "off", i)
    time.sleep(0.3)
    assert get(sc, "off").context.summary.covers_messages == 0
    assert compact(sc, "off", keep_last=2).compacted  # manual still works


def test_automatic_compaction_backs_off_and_stops(start_sidecar, store_uri_for, fake_openai):
    fake_openai.mode = "error500"
    sc = start_sidecar(
        store_uri_for("lmdb"),
        contexts__keep_last=2,
        **openai_settings(
            fake_openai,
            compaction__backoff_initial=0.0,
            compaction__backoff_stop_after=2,
            compaction__backoff_resume_after=0.0,
        ),
    )
    big_turn(sc, "bo", 0)
    w = Watcher(sc, "bo")
    failures = []
    i = 1
    while len(failures) < 2:
        assert i < 20, "no failure reported"
        r = big_turn(sc, "bo", i)
        i += 1
        if r.compaction_due:
            failures.append(w.next(pb.CONTEXT_EVENT_KIND_COMPACTION_FAILED))
    assert "failure 1" in failures[0].detail and "failure 2" in failures[1].detail
    assert "stopped" in failures[1].detail
    calls = len(fake_openai.requests)
    for j in range(5):  # stopped: no more attempts
        big_turn(sc, "bo", 100 + j)
    time.sleep(0.3)
    assert len(fake_openai.requests) == calls
    auto = sc.extra["sidecar"].domain.auto
    assert auto.backoff_status("bo").stopped
    # A manual compaction that works resets the back-off.
    fake_openai.mode = "json"
    assert compact(sc, "bo", keep_last=2).compacted
    assert auto.backoff_status("bo").failures == 0
    w.close()


def test_automatic_compaction_waits_between_failures(start_sidecar, uri, fake_openai):
    fake_openai.mode = "error500"
    sc = start_sidecar(
        uri,
        contexts__keep_last=2,
        **openai_settings(
            fake_openai, compaction__backoff_initial=3600, compaction__backoff_max=7200
        ),
    )
    big_turn(sc, "wait", 0)
    w = Watcher(sc, "wait")
    i = 1
    while not big_turn(sc, "wait", i).compaction_due:
        i += 1
    ev = w.next(pb.CONTEXT_EVENT_KIND_COMPACTION_FAILED)
    assert "next automatic attempt in 3600s" in ev.detail
    calls = len(fake_openai.requests)
    for j in range(4):
        big_turn(sc, "wait", 50 + j)
    time.sleep(0.3)
    assert len(fake_openai.requests) == calls
    w.close()
