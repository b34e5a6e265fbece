"""The summariser prompt, the answer schema and the transcript excerpt."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxd_sidecar.core.compaction import (
    ANSWER_SCHEMA,
    ANSWER_SCHEMA_JSON,
    MessageData,
    Summary,
    ToolCallData,
    build_excerpt,
    build_system_prompt,
    clip,
    estimate_text,
    render_message,
)
from ctxd_sidecar.core.compaction.excerpt import (
    MIN_CLIP_CHARS,
    PREVIOUS_SUMMARY_HEADER,
    fit_lines,
    line_tokens,
)

M = MessageData


def test_answer_schema_requires_the_four_lists_and_allows_a_narrative():
    schema = json.loads(ANSWER_SCHEMA_JSON)
    assert schema == ANSWER_SCHEMA
    assert schema["required"] == ["goals", "decisions", "open", "facts"]
    assert schema["properties"]["narrative"]["type"] == "string"
    assert schema["additionalProperties"] is False


def test_system_prompt_carries_the_schema_and_extra_instructions():
    prompt = build_system_prompt()
    assert ANSWER_SCHEMA_JSON in prompt and "verbatim" in prompt
    extended = build_system_prompt("Keep every ticket number.")
    assert extended.startswith(prompt) and extended.endswith("Keep every ticket number.")
    assert build_system_prompt("", template="custom").startswith("custom")


def test_each_kind_renders_on_its_own_tagged_entry():
    assert render_message(M.user("m1", "hi", principal="alice")) == "[m1 user alice] hi"
    assert render_message(M.user("m1", "hi")) == "[m1 user] hi"
    assert render_message(M.system("m2", "be brief")) == "[m2 system] be brief"
    assert render_message(M.note("m3", "idle")) == "[m3 note] idle"
    assert render_message(M.assistant("m4", "plain answer")) == "[m4 assistant] plain answer"
    calls = M.assistant(
        "m5",
        "reading",
        ToolCallData("call_1", "read_file", '{\n  "path": "/srv/a.py"\n}'),
        ToolCallData("call_2", "grep", '{"q": "TODO"}'),
    )
    assert render_message(calls) == (
        "[m5 assistant] reading → "
        'read_file#call_1({"path":"/srv/a.py"}), grep#call_2({"q": "TODO"})'
    )
    no_text = M.assistant("m6", "", ToolCallData("c", "ls", "{}"))
    assert render_message(no_text) == "[m6 assistant] → ls#c({})"
    tool = M.tool("m7", "call_1", "read_file", json.dumps({"lines": [1, 2]}, indent=2))
    assert render_message(tool) == '[m7 tool read_file#call_1] {"lines":[1,2]}'
    one_line = M.tool("m7", "call_1", "read_file", '{"lines": [1, 2]}')
    assert render_message(one_line) == '[m7 tool read_file#call_1] {"lines": [1, 2]}'
    failed = M.tool("m8", "call_2", "grep", "permission denied", is_error=True)
    assert render_message(failed) == "[m8 tool grep#call_2 error] permission denied"


def test_clip_keeps_identifiers_from_the_clipped_part():
    filler = "lorem ipsum dolor sit amet " * 40
    text = (
        "Start of the log. "
        + filler
        + " fetched https://api.example.test/v2/orders?id=7 into /var/tmp/orders.json "
        + "for request 3f2a9c1e-7b4d-4e8a-9c0f-1a2b3c4d5e6f (call_9xZ) status 504 "
        + filler
        + " End of the log."
    )
    out = clip(text, 400)
    assert out.startswith("Start of the log.") and out.endswith("End of the log.")
    for ident in (
        "https://api.example.test/v2/orders?id=7",
        "/var/tmp/orders.json",
        "3f2a9c1e-7b4d-4e8a-9c0f-1a2b3c4d5e6f",
        "call_9xZ",
        "504",
    ):
        assert ident in out
    assert "chars clipped" in out
    assert len(out) < 400 + 160 + 60
    # words are not cut in half at the clip points
    head = out.split(" …[")[0]
    assert head.endswith(("lorem", "ipsum", "dolor", "sit", "amet"))


def test_short_text_is_not_clipped():
    assert clip("short", 10) == "short"


def test_each_message_is_clipped_to_the_clip_length():
    big = M.tool("m1", "c1", "cat", "word " * 5000)
    line = render_message(big, clip_chars=2000)
    assert len(line) < 2000 + 100
    calls = M.assistant(
        "m2", "x " * 3000, *(ToolCallData(f"c{i}", "w", "y " * 3000) for i in range(4))
    )
    assert len(render_message(calls, clip_chars=2000)) < 2000 + 4 * 120 + 200


def test_excerpt_includes_the_previous_summary_to_extend():
    previous = Summary(goals=["ship v2"], facts=["build 1432 green"])
    text = build_excerpt([M.user("m9", "next?")], previous)
    assert text.startswith(PREVIOUS_SUMMARY_HEADER)
    assert "- ship v2" in text and "- build 1432 green" in text
    assert text.endswith(
        "Transcript excerpt to compact (1 messages, oldest first):\n[m9 user] next?"
    )
    assert PREVIOUS_SUMMARY_HEADER not in build_excerpt([M.user("m9", "x")], Summary())


def test_excerpt_is_fitted_to_max_tokens():
    messages = [M.user(f"m{i}", f"message {i} " + "z" * 3000) for i in range(40)]
    full = build_excerpt(messages)
    assert estimate_text(full) > 20_000
    fitted = build_excerpt(messages, max_tokens=4000)
    assert estimate_text(fitted) <= 4000
    # shorter clips first: every message is still there
    assert all(f"[m{i} user]" in fitted for i in range(40))
    tight = build_excerpt(messages, max_tokens=1000)
    assert estimate_text(tight) <= 1000
    assert "earlier messages elided" in tight
    assert "[m39 user]" in tight and "[m0 user]" not in tight  # the oldest go first


def test_fit_lines_reports_what_it_did():
    messages = [M.user(f"m{i}", "q" * 5000) for i in range(10)]
    fitted = fit_lines(messages, 2000, budget_tokens=2000)
    assert fitted.clip_chars == 500 and fitted.elided == 0
    fitted = fit_lines(messages, 2000, budget_tokens=700)
    assert fitted.clip_chars == MIN_CLIP_CHARS
    assert fitted.elided == 0 and len(fitted.lines) == 10
    fitted = fit_lines(messages, 2000, budget_tokens=300)
    assert fitted.elided > 0 and len(fitted.lines) + fitted.elided == 10
    assert fit_lines(messages, 2000).clip_chars == 2000


@st.composite
def folded_messages(draw):
    out = []
    for i in range(draw(st.integers(1, 30))):
        size = draw(st.integers(0, 6000))
        word = draw(st.sampled_from(["x", "word ", "id_42 /a/b.py ", "https://h.test/p?q=1 "]))
        text = (word * (size // len(word) + 1))[:size]
        kind = draw(st.sampled_from(["user", "assistant", "tool", "note"]))
        if kind == "tool":
            out.append(M.tool(f"m{i}", f"c{i}", "t", text, is_error=draw(st.booleans())))
        elif kind == "assistant" and draw(st.booleans()):
            calls = [ToolCallData(f"c{i}_{k}", "t", text) for k in range(draw(st.integers(1, 5)))]
            out.append(M.assistant(f"m{i}", text[:100], *calls))
        else:
            out.append(MessageData(kind, f"m{i}", text=text))
    return out


@settings(max_examples=150, deadline=None)
@given(folded_messages(), st.integers(50, 20_000), st.sampled_from([300, 2000]))
def test_fitted_lines_stay_within_the_budget(messages, budget, clip_chars):
    fitted = fit_lines(messages, clip_chars, budget)
    n = len(messages)
    assert fitted.elided + len(fitted.lines) == n
    total = sum(line_tokens(line) for line in fitted.lines)
    note = line_tokens(f"({n} earlier messages elided to fit the summariser's window)")
    assert total + (note if fitted.elided else 0) <= budget
    ids = [line[1:].split(" ", 1)[0] for line in fitted.lines]
    assert ids == [m.id for m in messages[fitted.elided :]]  # the newest, in order
    if fitted.elided == 0:
        unbounded = fit_lines(messages, clip_chars)
        if fitted.clip_chars == clip_chars:
            assert fitted.lines == unbounded.lines  # nothing clipped that did not have to be
