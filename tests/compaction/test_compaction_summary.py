"""Summary answers (JSON, fenced, plain, malformed), merging, skill eviction."""

from __future__ import annotations

import json

import pytest

from ctxd_sidecar.core.compaction import (
    MalformedAnswer,
    MessageData,
    Summary,
    ToolCallData,
    merge,
    parse_answer,
    skill_references,
    skills_to_evict,
)
from ctxd_sidecar.core.compaction.summary import ITEM_MAX_CHARS

M = MessageData
ANSWER = {
    "goals": ["migrate billing to Postgres 16"],
    "decisions": ["use pg_dump, not logical replication"],
    "open": ["schedule the downtime window"],
    "facts": ["billing DB is mysql://db.internal:3306/billing"],
}


# -- parse_answer ---------------------------------------------------------------------


def test_parses_a_json_object():
    s = parse_answer(json.dumps({**ANSWER, "narrative": "short story"}))
    assert s.goals == ANSWER["goals"] and s.facts == ANSWER["facts"]
    assert s.narrative == "short story"
    assert s.covers_messages == 0


@pytest.mark.parametrize(
    "text",
    [
        "```json\n" + json.dumps(ANSWER) + "\n```",
        "```\n" + json.dumps(ANSWER, indent=2) + "\n```",
        "Here is the summary:\n\n```JSON\n" + json.dumps(ANSWER) + "\n```\nAnything else?",
        "Sure! " + json.dumps(ANSWER),
        "<think>the user wants json</think>\n" + json.dumps(ANSWER),
        json.dumps({"summary": ANSWER}),
    ],
)
def test_parses_json_wrapped_the_way_models_write_it(text):
    s = parse_answer(text)
    assert (s.goals, s.decisions, s.open, s.facts) == (
        ANSWER["goals"],
        ANSWER["decisions"],
        ANSWER["open"],
        ANSWER["facts"],
    )


def test_missing_lists_default_to_empty_and_aliases_are_understood():
    s = parse_answer('{"goals": ["g"], "open_questions": ["q?"], "fact": "one fact"}')
    assert s.goals == ["g"] and s.open == ["q?"] and s.facts == ["one fact"]
    assert s.decisions == []


def test_items_are_cleaned():
    s = parse_answer(
        json.dumps(
            {
                "goals": ["  - ship   the\nrelease ", "", None, 42, {"text": "from an object"}],
                "decisions": [],
                "open": [],
                "facts": ["x" * 1000],
            }
        )
    )
    assert s.goals == ["ship the release", "42", "from an object"]
    assert len(s.facts[0]) == ITEM_MAX_CHARS and s.facts[0].endswith("…")


@pytest.mark.parametrize(
    "text",
    [
        "The user is migrating billing; the agent read /srv/billing.py and found 3 tables.",
        '"The user is migrating billing."',
        "Notes:\n```python\nprint('not json')\n```\nstill prose",
    ],
)
def test_plain_text_becomes_the_narrative(text):
    s = parse_answer(text)
    assert s.goals == s.decisions == s.open == s.facts == []
    assert "migrating billing" in s.narrative or "still prose" in s.narrative


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "empty"),
        ("   \n", "empty"),
        ("<think>only thinking</think>", "empty"),
        ('{"goals": ["unterminated', "not valid JSON"),
        ("```json\n{goals: [1,}\n```", "not valid JSON"),
        ("[1, 2, 3]", "JSON list"),
        ('{"title": "x", "body": "y"}', "none of the fields"),
        ('{"goals": {"a": 1}}', "goals must be a list"),
        ('{"goals": [], "narrative": 5}', "narrative must be a string"),
        ('""', "empty string"),
    ],
)
def test_malformed_answers_are_refused_with_a_reason(text, words):
    with pytest.raises(MalformedAnswer) as exc:
        parse_answer(text)
    assert words in exc.value.message
    assert exc.value.reason == "malformed_answer"


# -- merge --------------------------------------------------------------------------


def test_merge_across_three_successive_compactions():
    first = merge(None, Summary(**ANSWER, covers_messages=20), now_ms=1000)
    assert first.covers_messages == 20 and first.updated_ms == 1000
    assert first.goals == ANSWER["goals"]

    second = merge(
        first,
        Summary(
            goals=["Migrate billing to Postgres 16."],  # same goal, other case/punctuation
            decisions=["cut over on Sunday 02:00 UTC"],
            open=["schedule the downtime window", "who signs off?"],
            facts=["pg_dump took 41 min on staging"],
            narrative="Staging rehearsal went fine.",
            covers_messages=15,
        ),
        now_ms=2000,
    )
    assert second.goals == ["migrate billing to Postgres 16"]  # oldest wording kept
    assert second.decisions == [
        "use pg_dump, not logical replication",
        "cut over on Sunday 02:00 UTC",
    ]
    assert second.open == ["schedule the downtime window", "who signs off?"]
    assert second.covers_messages == 35 and second.updated_ms == 2000
    assert second.narrative == "Staging rehearsal went fine."

    third = merge(
        second,
        Summary(
            facts=["cut-over finished at 02:47 UTC"],
            narrative="Staging rehearsal went fine.\n\nProduction cut-over done.",
            covers_messages=12,
        ),
        now_ms=3000,
    )
    assert third.facts == [
        "billing DB is mysql://db.internal:3306/billing",
        "pg_dump took 41 min on staging",
        "cut-over finished at 02:47 UTC",
    ]
    assert third.goals == second.goals and third.decisions == second.decisions
    assert third.narrative == "Staging rehearsal went fine.\n\nProduction cut-over done."
    assert third.covers_messages == 47 and third.updated_ms == 3000
    # the inputs are not changed
    assert second.covers_messages == 35 and len(second.facts) == 2


def test_merge_caps_each_list_dropping_the_oldest():
    old = Summary(facts=[f"fact {i}" for i in range(30)])
    new = Summary(facts=[f"fact {i}" for i in range(25, 40)])
    merged = merge(old, new, cap=32)
    assert merged.facts == [f"fact {i}" for i in range(8, 40)]
    assert len(merge(merged, Summary(facts=["x"]), cap=5).facts) == 5


def test_merge_keeps_the_newest_narrative_paragraphs_within_the_cap():
    old = Summary(narrative="\n\n".join(f"paragraph {i} " + "x" * 80 for i in range(5)))
    merged = merge(old, Summary(narrative="latest news"), narrative_max_chars=300)
    assert merged.narrative.endswith("latest news")
    assert "paragraph 0" not in merged.narrative and "paragraph 4" in merged.narrative
    assert len(merged.narrative) <= 300
    huge = merge(None, Summary(narrative="y" * 1000), narrative_max_chars=300)
    assert len(huge.narrative) == 300


def test_summary_render_and_round_trip():
    s = Summary(**ANSWER, narrative="story", covers_messages=3, updated_ms=9)
    text = s.render()
    assert text.startswith("Summary of earlier conversation:")
    assert "Goals:\n- migrate billing to Postgres 16" in text and text.endswith("story")
    assert "Open items:" in text
    assert Summary.from_dict(json.loads(json.dumps(s.to_dict()))) == s
    assert Summary().render() == "" and Summary().is_empty()
    assert "Decisions" not in Summary(goals=["g"]).render()


# -- skills ---------------------------------------------------------------------------


def test_skill_references():
    text = "use @skill:pdf-tools and @skill:git.flow. Not email@skill:x? @skill:"
    assert skill_references(text) == {"pdf-tools", "git.flow", "x"}


def test_skills_not_referenced_in_the_kept_window_are_evicted():
    kept = [
        M.user("m5", "now fill the form with @skill:pdf"),
        M.assistant("m6", "", ToolCallData("c1", "run", '{"hint": "@skill:shell"}')),
        M.tool("m7", "c1", "run", "see @skill:logs for details"),
    ]
    loaded = ["pdf", "shell", "logs", "sql", "planner", "git"]
    evicted = skills_to_evict(loaded, kept, also_referenced_in=["1. review via @skill:planner"])
    assert evicted == ["sql", "git"]
    assert skills_to_evict([], kept) == []
    assert skills_to_evict(["pdf"], []) == ["pdf"]
