"""The summariser a user meets without a model (``extractive``) summarises:
it de-duplicates, tells goals from decisions from facts and open items, and
a fold leaves at most half the tokens it took, with every artifact carried.

The first case is a newcomer's first try, as reported: ten messages folded
from 222 to 218 tokens, user messages copied into ``goals`` and one decision
("we decided to use Postgres 16") as five goal lines."""

from __future__ import annotations

from ctxd_plugins.extractive_summariser import extract
from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.core.compaction import MessageData, ToolCallData, estimate_text, merge
from ctxd_sidecar.core.compaction.fidelity import measure
from ctxd_sidecar.core.compaction.summary import Summary
from ctxd_sidecar.core.estimate import estimate_message
from tests.support.compaction import append, assistant, user

M = MessageData

NEWCOMER = [
    ("user", "Hi! We are moving the billing service off MySQL. We decided to use Postgres 16."),
    (
        "assistant",
        "Great, so we decided to use Postgres 16. I will look at the current schema first, "
        "then list what changes between MySQL and Postgres for our tables.",
    ),
    ("user", "Yes, we decided to use Postgres 16. The schema is in db/schema.sql."),
    (
        "assistant",
        "Thanks. The schema has 12 tables and invoices is the largest of them, with most of "
        "the foreign keys pointing at it. Nothing in it is MySQL-only except the "
        "auto-increment columns, which become identity columns.",
    ),
    ("user", "Remember: we decided to use Postgres 16."),
    (
        "assistant",
        "Understood. Next step: write the migration script. I would do it table by table so "
        "that each step can be checked on its own.",
    ),
    ("user", "Again, we decided to use Postgres 16, not 15!"),
    (
        "assistant",
        "Noted, Postgres 16 it is. The invoices table will want an index on customer and "
        "date once it moves, since the monthly reports filter on both.",
    ),
    ("user", "OK so we decided to use Postgres 16. Please draft the migration."),
    (
        "assistant",
        "Drafting it now in migrations/001_pg16.sql. It creates the tables, copies the rows "
        "in batches and adds the indexes at the end.",
    ),
    ("user", "Thanks, go ahead."),
    ("assistant", "Done."),
]


def test_a_newcomers_first_fold_summarises(start_sidecar):
    """Reproduced through the API: ten messages folded by the default summariser."""
    sc = start_sidecar("memory://")
    msgs = [user(t) if kind == "user" else assistant(t) for kind, t in NEWCOMER]
    append(sc, "first", *msgs)
    r = sc.contexts.Compact(pb.CompactRequest(context_id="first", keep_last=2))
    assert r.compacted and r.summariser == "extractive" and r.folded == 10
    s = r.summary
    said = [t for kind, t in NEWCOMER[:10] if kind == "user"]
    # No user message copied whole into goals, and one decision said five
    # times is one decision, not a goal.
    assert not [g for g in s.goals if g in said], list(s.goals)
    postgres = [i for i in (*s.goals, *s.decisions, *s.facts, *s.open) if "Postgres 16" in i]
    assert len(postgres) == 1 and postgres[0] in s.decisions, postgres
    assert "Next step: write the migration script." in s.open
    # A fold at least halves what it folded (the block against the span).
    folded = sum(estimate_message(M(kind, "m", text=t)) for kind, t in NEWCOMER[:10])
    block = sc.contexts.GetContext(
        pb.GetContextRequest(context_id="first", view=pb.CONTEXT_VIEW_SLICE)
    ).slice[0]
    assert block.id == "summary"
    summary_tokens = estimate_text(block.system.text or block.user.text)
    assert summary_tokens <= folded // 2, (summary_tokens, folded, r.tokens_before, r.tokens_after)
    assert r.tokens_after < r.tokens_before


def _coding() -> list[MessageData]:
    return [
        M.user("m1", "Please fix the failing test in tests/test_api.py."),
        M.assistant(
            "m2", "", ToolCallData("call_1", "run", '{"command": "pytest tests/test_api.py -x"}')
        ),
        M.tool(
            "m3",
            "call_1",
            "run",
            "FAILED tests/test_api.py::test_login - KeyError: 'token'\n" + "log line\n" * 40,
        ),
        M.assistant("m4", "The login handler drops the token. We'll switch to PyJWT instead."),
        M.user("m5", "Why does it drop it?"),
        M.assistant("m6", "The session middleware strips headers; I still need to check nginx."),
        M.user("m7", "We agreed to keep nginx 1.25. Also the deploy runs at 14:00."),
    ]


def test_goals_decisions_facts_and_open_items_apart():
    s = extract(_coding())
    assert s.goals == ["Please fix the failing test in tests/test_api.py."]
    assert any("PyJWT" in d for d in s.decisions)
    assert any("nginx 1.25" in d for d in s.decisions)
    assert not any("nginx 1.25" in g for g in s.goals)
    assert any("still need to check nginx" in o for o in s.open)
    assert any(f.startswith("run#call_1: failed") or f.startswith("run#call_1:") for f in s.facts)
    # A tool result becomes one short line, never its whole output.
    assert all(len(f) <= 160 for f in s.facts), s.facts
    assert any("14:00" in f for f in s.facts)


def test_near_duplicates_are_one_item_kept_in_the_first_wording():
    msgs = [
        M.assistant("m1", "We decided to use Redis 7 for the cache."),
        M.assistant("m2", "As agreed, we decided to use Redis 7 for the cache!"),
        M.assistant("m3", "we DECIDED to use redis 7 for the cache"),
    ]
    s = extract(msgs)
    assert s.decisions == ["We decided to use Redis 7 for the cache."]
    # Across folds too: the merge of a summary with a near duplicate keeps one.
    again = extract([M.assistant("m4", "So, we decided to use Redis 7 for the cache.")])
    merged = merge(s, again)
    assert len(merged.decisions) == 1


def test_a_fold_keeps_every_artifact_and_halves_the_span():
    folded = _coding() * 3
    s = extract(folded)
    merged = merge(Summary(), s, folded=folded)
    fidelity = measure(folded, Summary(), merged)
    assert fidelity.score == 1.0, fidelity.dropped
    span = sum(estimate_text(m.text or m.content) + 8 for m in folded)
    assert estimate_text(merged.render()) <= span // 2


def test_a_tool_result_is_its_most_telling_line():
    log = "starting\n" + "INFO ok\n" * 30 + "ERROR payments: connection refused (db-2)\nINFO done"
    record = '{\n  "id": "ORD-118734",\n  "status": "failed",\n  "rows": 3,\n  "items": [1, 2]\n}'
    s = extract(
        [
            M.tool("m1", "c1", "tail_log", log),
            M.tool("m2", "c2", "get_order", record),
            M.tool("m3", "c3", "ls", "a.txt\nb.txt"),
        ]
    )
    assert s.facts == [
        "tail_log#c1: ERROR payments: connection refused (db-2)",
        "get_order#c2: id=ORD-118734, status=failed, rows=3",
        "ls#c3: a.txt",
    ]


def test_a_merge_keeps_a_short_item_that_may_be_news():
    old = Summary(facts=["tests pass except test_login"], decisions=["use Redis 7 for the cache"])
    new = Summary(facts=["tests pass"], decisions=["as agreed, use Redis 7 for the cache"])
    merged = merge(old, new)
    assert merged.facts == ["tests pass except test_login", "tests pass"]
    assert merged.decisions == ["use Redis 7 for the cache"]
