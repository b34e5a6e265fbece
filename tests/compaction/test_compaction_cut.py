"""Cut rules: where a compaction folds, with tool-call turns and edge cases."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxd_sidecar.core import errors
from ctxd_sidecar.core.compaction import Cut, Decline, MessageData, ToolCallData, plan_cut
from ctxd_sidecar.core.compaction.cut import (
    USER_PREAMBLE_HEAD,
    abandoned_calls,
    open_calls,
    place_summary,
    summary_placement,
)

M = MessageData


def call(cid: str, name: str = "read_file") -> ToolCallData:
    return ToolCallData(cid, name, '{"path": "/tmp/x"}')


def chat(n: int) -> list[MessageData]:
    """user/assistant alternating, starting with user at index 0."""
    return [
        M.user(f"m{i}", f"question {i}") if i % 2 == 0 else M.assistant(f"m{i}", f"answer {i}")
        for i in range(n)
    ]


def kinds(messages, cut: Cut) -> list[str]:
    return [m.kind for m in messages[cut.fold :]]


# -- keep_last ----------------------------------------------------------------------


def test_keeps_the_last_keep_last_messages_when_that_starts_at_a_user_message():
    messages = chat(20)
    cut = plan_cut(messages, keep_last=12)
    assert isinstance(cut, Cut)
    assert (cut.fold, cut.kept) == (8, 12)
    assert cut.fold_through_id == "m7"
    assert messages[cut.fold].kind == "user"
    assert cut.folded_tokens + cut.kept_tokens == sum(m.tokens for m in messages)
    assert cut.target_met is None


def test_moves_back_to_the_user_message_so_the_window_starts_with_it():
    messages = chat(20)
    cut = plan_cut(messages, keep_last=11)  # n - 11 = 9 is an assistant message
    assert (cut.fold, cut.kept) == (8, 12)


def test_default_keep_last_is_12():
    assert plan_cut(chat(30)).kept == 12


def test_keep_last_at_or_above_length_declines():
    for keep in (10, 11, 50):
        result = plan_cut(chat(10), keep_last=keep)
        assert isinstance(result, Decline)
        assert "keeps them all" in result.reason


def test_empty_transcript_declines():
    result = plan_cut([], keep_last=3)
    assert isinstance(result, Decline) and "empty" in result.reason


def test_invalid_arguments_name_the_field():
    with pytest.raises(errors.InvalidArgument) as exc:
        plan_cut(chat(5), keep_last=0)
    assert exc.value.field == "keep_last"
    with pytest.raises(errors.InvalidArgument) as exc:
        plan_cut(chat(5), keep_last=2, target_tokens=0)
    assert exc.value.field == "target_tokens"


# -- tool rounds ----------------------------------------------------------------------


def tool_transcript() -> list[MessageData]:
    return [
        M.user("m0", "fix the build"),
        M.assistant("m1", "", call("c1"), call("c2", "grep")),
        M.tool("m2", "c1", "read_file", '{"text": "..."}'),
        M.tool("m3", "c2", "grep", "3 matches"),
        M.assistant("m4", "found it"),
        M.user("m5", "and the tests?"),
        M.assistant("m6", "", call("c3", "run_tests")),
        M.tool("m7", "c3", "run_tests", '{"passed": 41, "failed": 1}', is_error=True),
        M.assistant("m8", "one test fails"),
        M.user("m9", "fix it"),
        M.assistant("m10", "", call("c4", "edit")),
        M.tool("m11", "c4", "edit", "ok"),
    ]


def test_never_separates_an_assistant_turn_from_its_tool_results():
    messages = tool_transcript()
    # n - keep_last lands on a tool result (m7): the whole round and the user
    # message that started it stay.
    cut = plan_cut(messages, keep_last=5)
    assert cut.fold == 5
    assert kinds(messages, cut)[:3] == ["user", "assistant", "tool"]
    # landing on the assistant call (m10) or its result (m11) moves back to m9.
    assert plan_cut(messages, keep_last=2).fold == 9
    assert plan_cut(messages, keep_last=1).fold == 9


def test_a_user_message_inside_an_open_tool_round_is_not_a_cut():
    messages = [
        M.user("m0", "start"),
        M.assistant("m1", "", call("c1"), call("c2")),
        M.tool("m2", "c1", "read_file", "a"),
        M.user("m3", "are you done?"),  # arrives before the second result
        M.tool("m4", "c2", "read_file", "b"),
        M.assistant("m5", "done"),
        M.user("m6", "thanks"),
        M.assistant("m7", "bye"),
    ]
    # m3 would split m1's round: the only cut up to n - 5 is the round at m1
    cut = plan_cut(messages, round_cuts=True, keep_last=5)
    assert cut.fold == 1 and not cut.opens_with_user
    assert plan_cut(messages, keep_last=2).fold == 6
    # a window that opens with that round (an earlier round cut kept it) has
    # no valid cut up to m3
    result = plan_cut(messages[1:], round_cuts=True, keep_last=5)
    assert isinstance(result, Decline)
    assert "tool results" in result.reason


def test_reused_call_ids_match_the_latest_call():
    messages = [
        M.user("m0", "a"),
        M.assistant("m1", "", call("0")),
        M.tool("m2", "0", "read_file", "x"),
        M.user("m3", "b"),
        M.assistant("m4", "", call("0")),  # the provider numbers calls per turn
        M.tool("m5", "0", "read_file", "y"),
        M.user("m6", "c"),
        M.assistant("m7", "ok"),
    ]
    assert plan_cut(messages, keep_last=5).fold == 3


def test_a_result_for_an_unknown_call_does_not_block_the_cut():
    messages = [
        M.user("m0", "a"),
        M.assistant("m1", "ok"),
        M.user("m2", "b"),
        M.tool("m3", "gone", "read_file", "late result of a call folded long ago"),
        M.assistant("m4", "ok"),
    ]
    assert plan_cut(messages, keep_last=3).fold == 2


def test_a_pending_call_at_the_end_stays_with_the_kept_window():
    messages = chat(6) + [M.assistant("m6", "", call("c9"))]
    cut = plan_cut(messages, keep_last=1)
    assert cut.fold == 4 and kinds(messages, cut) == ["user", "assistant", "assistant"]


def test_one_long_agent_turn_without_tool_calls_declines():
    messages = [M.user("m0", "do the whole migration")]
    messages += [M.assistant(f"a{i}", "still working " * 20) for i in range(10)]
    result = plan_cut(messages, keep_last=4)
    assert isinstance(result, Decline)
    assert "next user message" in result.reason
    assert isinstance(plan_cut(messages, keep_last=4, target_tokens=10), Decline)


def test_system_and_note_messages_before_the_cut_are_folded():
    messages = [
        M.system("m0", "be brief"),
        M.user("m1", "hello"),
        M.assistant("m2", "hi"),
        M.note("m3", "user went idle"),
        M.user("m4", "back"),
        M.assistant("m5", "welcome back"),
    ]
    cut = plan_cut(messages, keep_last=2)
    assert cut.fold == 4 and cut.fold_through_id == "m3"  # the note is folded
    assert kinds(messages, cut) == ["user", "assistant"]
    # a window that would start at the note moves back to the earlier user
    # message (the system message alone is folded)
    cut = plan_cut(messages, keep_last=3)
    assert cut.fold == 1 and kinds(messages, cut)[:2] == ["user", "assistant"]


def test_only_later_user_messages_suggests_lowering_keep_last():
    messages = [
        M.user("m0", "a"),
        M.assistant("m1", "b"),
        M.assistant("m2", "c"),
        M.user("m3", "d"),
        M.assistant("m4", "e"),
    ]
    result = plan_cut(messages, keep_last=3)
    assert isinstance(result, Decline) and "lower keep_last" in result.reason
    assert plan_cut(messages, keep_last=2).fold == 3


# -- open calls pin the cut ------------------------------------------------------------


def long_job_transcript(exchanges: int = 6) -> list[MessageData]:
    """job-1 is started and keeps running while the conversation goes on."""
    messages = [
        M.user("m0", "deploy and meanwhile answer questions"),
        M.assistant("m1", "", ToolCallData("job-1", "deploy", '{"env": "prod"}')),
        M.assistant("m2", "the deploy is running"),
    ]
    for i in range(exchanges):
        messages += [M.user(f"u{i}", f"question {i}"), M.assistant(f"a{i}", f"answer {i}")]
    return messages


def test_an_open_call_is_never_folded():
    messages = long_job_transcript()
    assert open_calls(messages) == [(1, "job-1")]
    result = plan_cut(messages, keep_last=4)
    # every user boundary lies after the open call: nothing may be folded
    # except... nothing, since the call is at index 1 and m0 alone is no cut
    assert isinstance(result, Decline)
    assert "job-1" in result.reason and "no result" in result.reason
    # once the result arrives the call and its result stay together: the
    # only cut is the round boundary at the call ...
    done = [*messages, M.tool("r", "job-1", "deploy", '{"status": "ok"}')]
    assert open_calls(done) == []
    cut = plan_cut(done, round_cuts=True, keep_last=4)
    assert cut.fold == 1 and not cut.opens_with_user
    # ... until the conversation moves on past the result
    done += chat(6)
    cut = plan_cut(done, keep_last=4)
    assert cut.fold == len(done) - 4 and cut.opens_with_user


def test_an_open_call_pins_the_cut_before_it():
    messages = chat(6) + long_job_transcript()[1:]  # job-1 at index 6
    cut = plan_cut(messages, keep_last=2)
    assert cut.fold <= 6
    assert any(c.id == "job-1" for m in messages[cut.fold :] for c in m.tool_calls)


def test_an_open_call_is_abandoned_after_n_user_messages():
    messages = long_job_transcript(exchanges=6)  # 6 user messages after job-1
    assert abandoned_calls(messages, 6) == [(1, "job-1")]
    assert abandoned_calls(messages, 7) == []
    assert isinstance(plan_cut(messages, keep_last=4, abandon_after=7), Decline)
    cut = plan_cut(messages, keep_last=4, abandon_after=6)
    assert isinstance(cut, Cut) and cut.fold == len(messages) - 4
    assert isinstance(plan_cut(messages, keep_last=4, abandon_after=None), Decline)
    with pytest.raises(errors.InvalidArgument) as exc:
        plan_cut(messages, abandon_after=0)
    assert exc.value.field == "abandon_after"


def test_a_reused_call_id_leaves_the_earlier_call_open():
    messages = [
        M.user("m0", "a"),
        M.assistant("m1", "", call("0")),  # never answered: its id is reused
        M.user("m2", "b"),
        M.assistant("m3", "", call("0")),
        M.tool("m4", "0", "read_file", "answers m3"),
        M.user("m5", "c"),
        M.assistant("m6", "ok"),
    ]
    assert open_calls(messages) == [(1, "0")]
    assert isinstance(plan_cut(messages, keep_last=2), Decline)
    assert plan_cut(messages, keep_last=2, abandon_after=2).fold == 5
    assert isinstance(plan_cut(messages, keep_last=2, abandon_after=3), Decline)  # 2 users


# -- round boundaries in long agentic runs -----------------------------------------------


def agent_run(rounds: int = 18) -> list[MessageData]:
    messages = [M.user("m0", "do the whole migration")]
    for i in range(rounds):
        messages += [
            M.assistant(f"a{i}", "", call(f"c{i}")),
            M.tool(f"t{i}", f"c{i}", "read_file", "data " * 50),
        ]
    return messages


def test_a_long_agent_run_is_cut_between_complete_rounds():
    messages = agent_run(18)
    cut = plan_cut(messages, round_cuts=True, keep_last=4)
    assert isinstance(cut, Cut) and not cut.opens_with_user
    assert cut.fold == len(messages) - 4
    kept = messages[cut.fold :]
    assert kept[0].kind == "assistant" and kept[0].tool_calls
    calls = {c.id for m in kept for c in m.tool_calls}
    assert all(m.call_id in calls for m in kept if m.kind == "tool")
    assert all(any(m.call_id == c for m in kept if m.kind == "tool") for c in calls)
    # keep_last on a tool result moves back to the call that made it
    assert plan_cut(messages, round_cuts=True, keep_last=3).fold == len(messages) - 4
    # a target folds further, still at a round
    cut = plan_cut(messages, round_cuts=True, keep_last=12, target_tokens=200)
    assert isinstance(cut, Cut) and cut.target_met and cut.kept == 4
    assert not cut.opens_with_user


def test_round_boundaries_are_opt_in():
    result = plan_cut(agent_run(18), keep_last=4)
    assert isinstance(result, Decline) and "next user message" in result.reason


def test_a_user_boundary_is_preferred_over_a_round_boundary():
    messages = agent_run(6) + [M.user("u", "status?")] + agent_run(6)[1:]
    cut = plan_cut(messages, round_cuts=True, keep_last=4)
    assert cut.fold == 13 and cut.opens_with_user


def test_a_round_with_a_call_still_open_does_not_open_the_window():
    messages = agent_run(4)
    messages.insert(7, M.assistant("x", "", call("cx"), call("cy")))
    messages.insert(8, M.tool("tx", "cx", "read_file", "only one answer"))
    # cy is open at index 7: the cut stays at or before it, and index 7 is no
    # round boundary (its round is incomplete)
    cut = plan_cut(messages, round_cuts=True, keep_last=2)
    assert cut.fold == 5


def test_summary_placement_per_provider():
    messages = agent_run(4)
    cut = plan_cut(messages, round_cuts=True, keep_last=2)
    kept = messages[cut.fold :]
    assert summary_placement(kept, "anthropic") == "user_preamble"
    assert summary_placement(kept, "openai") == "system"
    assert summary_placement(kept, "ctxd") == "system"
    assert summary_placement(chat(4), "anthropic") == "system"
    assert summary_placement([M.note("n", "x"), *chat(2)], "anthropic") == "system"
    assert place_summary("S", kept, "anthropic") == ("user_preamble", f"{USER_PREAMBLE_HEAD}\nS")
    assert place_summary("S", kept, "openai") == ("system", "S")
    assert place_summary("", kept, "anthropic") == ("user_preamble", "")
    with pytest.raises(ValueError):
        summary_placement(kept, "gemini")


# -- target_tokens ----------------------------------------------------------------------


def big_chat(n: int, chars: int = 400) -> list[MessageData]:
    return [
        M.user(f"m{i}", "u" * chars) if i % 2 == 0 else M.assistant(f"m{i}", "a" * chars)
        for i in range(n)
    ]


def test_target_folds_more_until_the_tail_fits():
    messages = big_chat(20)  # 104 tokens each
    per = messages[0].tokens
    cut = plan_cut(messages, keep_last=12, target_tokens=4 * per)
    assert (cut.fold, cut.kept) == (16, 4)
    assert cut.target_met and cut.kept_tokens <= 4 * per


def test_target_takes_the_longest_tail_that_fits_and_starts_with_a_user_message():
    messages = big_chat(20)
    per = messages[0].tokens
    cut = plan_cut(messages, keep_last=12, target_tokens=5 * per)  # 5 fit; m15 is assistant
    assert (cut.fold, cut.kept) == (16, 4)


def test_target_keeps_at_least_two_messages():
    messages = big_chat(20)
    cut = plan_cut(messages, keep_last=12, target_tokens=1)
    assert (cut.fold, cut.kept) == (18, 2)
    assert cut.target_met is False


def test_target_does_not_fold_below_keep_last_when_the_tail_already_fits():
    messages = chat(20)
    cut = plan_cut(messages, keep_last=12, target_tokens=10**6)
    assert (cut.fold, cut.kept, cut.target_met) == (8, 12, True)


def test_target_folds_even_when_keep_last_would_keep_everything():
    messages = big_chat(6, chars=4000)  # a few huge messages
    cut = plan_cut(messages, keep_last=12, target_tokens=2500)
    assert (cut.fold, cut.kept, cut.target_met) == (4, 2, True)


def test_target_declines_when_everything_fits():
    result = plan_cut(chat(6), keep_last=12, target_tokens=10**6)
    assert isinstance(result, Decline) and "fit" in result.reason


def test_target_with_keep_last_one_may_keep_one_message():
    messages = big_chat(5)  # ends with a user message
    cut = plan_cut(messages, keep_last=1, target_tokens=200)
    assert (cut.fold, cut.kept) == (4, 1)


def test_target_unreachable_because_of_a_tool_round_still_folds_what_it_can():
    messages = [
        M.user("m0", "x" * 400),
        M.assistant("m1", "y" * 400),
        M.user("m2", "z" * 400),
        M.assistant("m3", "", call("c1")),
        M.tool("m4", "c1", "read_file", "w" * 4000),
        M.assistant("m5", "done"),
    ]
    cut = plan_cut(messages, keep_last=6, target_tokens=50)
    assert cut.fold == 2 and cut.target_met is False


# -- properties -------------------------------------------------------------------------


@st.composite
def transcripts(draw):
    """Random transcripts built from rounds: user/system/note messages and
    assistant turns whose tool results may come later, with a user message
    sometimes arriving in the middle of a round. Call ids are reused."""
    messages: list[MessageData] = []
    pending: list[str] = []
    for _ in range(draw(st.integers(0, 40))):
        step = draw(st.sampled_from(["user", "user", "assistant", "calls", "note", "system"]))
        i = len(messages)
        size = draw(st.integers(0, 300))
        if step == "calls":
            ids = [f"c{draw(st.integers(0, 6))}" for _ in range(draw(st.integers(1, 3)))]
            messages.append(M.assistant(f"m{i}", "t" * size, *(call(c) for c in ids)))
            pending = list(ids)
            while pending and draw(st.booleans()):
                c = pending.pop(0)
                messages.append(M.tool(f"m{len(messages)}", c, "read_file", "r" * size))
        elif step == "assistant":
            messages.append(M.assistant(f"m{i}", "a" * size))
        else:
            messages.append(MessageData(step, f"m{i}", text="x" * size))
        if step != "calls" and pending and draw(st.booleans()):
            c = pending.pop(0)
            messages.append(M.tool(f"m{len(messages)}", c, "read_file", "late"))
    return messages


def caller_of(messages, j: int) -> int | None:
    """Brute force: the latest assistant before j that calls messages[j].call_id."""
    for a in range(j - 1, -1, -1):
        if messages[a].kind == "assistant" and any(
            c.id == messages[j].call_id for c in messages[a].tool_calls
        ):
            return a
    return None


def answered(messages, a: int, cid: str) -> bool:
    return any(
        m.kind == "tool" and m.call_id == cid and caller_of(messages, j) == a
        for j, m in enumerate(messages)
        if j > a
    )


def abandoned(messages, a: int, abandon_after) -> bool:
    users = sum(1 for m in messages[a + 1 :] if m.kind == "user")
    return abandon_after is not None and users >= abandon_after


def splits_a_round(messages, f: int) -> bool:
    """A kept tool result answers a folded call."""
    return any(
        m.kind == "tool" and (a := caller_of(messages, j)) is not None and a < f
        for j, m in enumerate(messages)
        if j >= f
    )


def pinned(messages, f: int, abandon_after) -> bool:
    """A folded call is unanswered and not abandoned."""
    return any(
        not answered(messages, a, c.id) and not abandoned(messages, a, abandon_after)
        for a in range(f)
        if messages[a].kind == "assistant"
        for c in messages[a].tool_calls
    )


def reference_kind(messages, f: int, abandon_after=None) -> str | None:
    """Brute force: "user" or "round" when a cut at f obeys the rules, else None."""
    if not 0 < f < len(messages):
        return None
    if splits_a_round(messages, f) or pinned(messages, f, abandon_after):
        return None
    m = messages[f]
    if m.kind == "user":
        return "user"
    if m.kind == "assistant" and m.tool_calls:
        if all(answered(messages, f, c.id) for c in m.tool_calls):
            return "round"
    return None


def preferred(candidates: dict[int, str], pick) -> int | None:
    users = [f for f, k in candidates.items() if k == "user"]
    rounds = [f for f, k in candidates.items() if k == "round"]
    return pick(users) if users else (pick(rounds) if rounds else None)


@settings(max_examples=300, deadline=None)
@given(
    transcripts(),
    st.integers(1, 15),
    st.one_of(st.none(), st.integers(1, 600)),
    st.one_of(st.none(), st.integers(1, 4)),
    st.booleans(),
)
def test_cut_invariants(messages, keep_last, target, abandon_after, rounds):
    n = len(messages)
    result = plan_cut(messages, keep_last, target, abandon_after=abandon_after, round_cuts=rounds)
    plain = plan_cut(messages, keep_last=keep_last, abandon_after=abandon_after, round_cuts=rounds)
    upper = n - keep_last if target is None else max(n - keep_last, n - 2)
    candidates = {
        f: k
        for f in range(1, max(upper, 0) + 1)
        if (k := reference_kind(messages, f, abandon_after)) is not None and (rounds or k == "user")
    }
    base = max(0, n - keep_last)
    if isinstance(result, Decline):
        assert result.reason
        if target is not None and sum(m.tokens for m in messages[base:]) <= target:
            candidates = {c: k for c, k in candidates.items() if c <= base}
        assert not candidates
        return
    f = result.fold
    kept = messages[f:]
    # no kept tool result answers a folded call
    assert not splits_a_round(messages, f)
    # no folded call is unanswered and not abandoned
    assert not pinned(messages, f, abandon_after)
    assert reference_kind(messages, f, abandon_after) is not None
    assert result.opens_with_user == (kept[0].kind == "user")
    if not result.opens_with_user:
        assert kept[0].kind == "assistant" and kept[0].tool_calls
        assert summary_placement(kept, "anthropic") == "user_preamble"
    assert result.kept == n - f and result.fold_through_id == messages[f - 1].id
    assert result.kept_tokens == sum(m.tokens for m in messages[f:])
    assert result.folded_tokens == sum(m.tokens for m in messages[:f])
    if target is None:
        assert result.kept >= keep_last
        # the latest valid cut, a user boundary when there is one
        assert f == preferred(candidates, max)
    else:
        assert result.kept >= min(keep_last, 2)
        assert result.target_met == (result.kept_tokens <= target)
        if isinstance(plain, Cut):
            assert f >= plain.fold  # a target never folds less than keep_last does
        if sum(m.tokens for m in messages[base:]) <= target:
            assert f == plain.fold  # the target is met without folding more
            return
        fitting = {
            c: k
            for c, k in candidates.items()
            if c >= base and sum(m.tokens for m in messages[c:]) <= target
        }
        if fitting:
            assert result.target_met and f == preferred(fitting, min)  # longest tail that fits
        else:
            assert not result.target_met
