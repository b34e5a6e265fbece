"""Cross-suite figures of ``python -m bench``: ctxd / peer ratios, growth, targets, skips."""

from __future__ import annotations

import json
import sys

import pytest

from bench import compare, peers
from bench.harness import Context, register, run_suites
from bench.report import Report, Result


def _series(report: Report, pattern: str, p50s: dict[int, float]) -> None:
    for mark, p50 in p50s.items():
        report.add(Result(pattern.format(mark=mark), "g", "us", p50, p50 * 2, 20))


def test_ratios_growth_and_targets(tmp_path):
    rep = Report()
    _series(rep, compare.CTXD_APPEND_TURN["lmdb"], {10: 500.0, 1_000: 520.0, 4_000: 540.0})
    rep.add(Result("ctxd.append_turn.lmdb.h10000", "g", "us", 600.0, 1000.0, 20))
    _series(
        rep,
        compare.PEERS["langgraph_sqlite"],
        {10: 5_000.0, 1_000: 60_000.0, 4_000: 240_000.0, 10_000: 600_000.0},
    )
    rep.add(Result("ctxd.cold_start", "g", "us", 900_000.0, None, 5))

    compare.add_comparisons(rep)

    row = rep.get_derived("cmp.append_turn.lmdb_vs_langgraph_sqlite.h4000")
    assert row.p50 == pytest.approx(540 / 240_000)
    assert row.p99 == pytest.approx(1080 / 480_000)
    assert row.note == "ctxd 444.4x faster"
    assert rep.get_derived("growth.append_turn.lmdb").p50 == pytest.approx(1.2)
    assert rep.get_derived("growth.append_turn.lmdb").p99 == pytest.approx(1.0)
    assert rep.get_derived("growth.peer.langgraph_sqlite").p50 == pytest.approx(120.0)
    # the peer that did not run at all and the S3 series are absent, not faked
    missing = rep.get_derived("cmp.append_turn.s3_vs_langgraph_sqlite.h10")
    assert missing.p50 is None and "ctxd.append_turn.s3.h10" in missing.note
    assert rep.get_derived("cmp.append_turn.lmdb_vs_agents_sqlite.h10").p50 is None
    assert rep.get_derived("growth.peer.agents_sqlite") is None

    checks = {c.name: c for c in rep.checks}
    assert checks["target.append_turn.growth.lmdb"].met is False
    assert checks["target.append_turn.vs_langgraph.h4000"].met is True
    assert checks["target.append_turn.vs_langgraph.h4000"].value == pytest.approx(240_000 / 540)
    assert checks["target.cold_start"].value == pytest.approx(0.9)
    assert checks["target.cold_start"].met is True
    assert checks["target.append_turn.growth.s3"].met is None

    table = rep.table()
    assert "ctxd 444.4x faster" in table and "MISSED" in table and "MET" in table
    data = json.loads(rep.write_json(tmp_path / "r.json").read_text())
    derived = {d["name"]: d for d in data["derived"]}
    assert derived["growth.append_turn.lmdb"]["p50"] == pytest.approx(1.2)
    assert {c["name"] for c in data["checks"]} == {t.name for t in compare.TARGETS}


def test_turn_reads_index_and_ledger_figures():
    rep = Report()
    _series(rep, compare.CTXD_TURN["lmdb"], {10: 3_000.0, 1_000: 3_100.0, 10_000: 3_300.0})
    _series(rep, compare.CTXD_TURN["lmdb_one_call"], {10: 2_000.0, 1_000: 6_000.0})
    _series(rep, compare.TURN_PEERS["agents_sqlite"], {10: 4_000.0, 1_000: 15_000.0})
    rep.add(Result("peer.agents_sqlite.turn.h10000", "g", "us", 150_000.0, 150_000.0, 20))
    _series(rep, compare.GROWTH_ONLY["incremental.lmdb"], {10: 1_000.0, 10_000: 1_200.0})
    rep.add(Result("ctxd.get_context.slice.lmdb.h10000", "g", "us", 40_000.0, 50_000.0, 10))
    _series(rep, compare.INDEX_GROWTH["index.create.s3_nolist"], {1_000: 10_000.0, 10_000: 9_000.0})
    for truth, c1, c3 in (("extractor", 100.0, 88.0), ("expected", 96.0, 91.0)):
        rep.add(Result(f"ctxd.ledger.recall.{truth}.c1", "ledger", "%", c1, None, 160))
        rep.add(Result(f"ctxd.ledger.recall.{truth}.c3", "ledger", "%", c3, None, 210))

    compare.add_comparisons(rep)

    row = rep.get_derived("cmp.turn.lmdb_vs_agents_sqlite.h1000")
    assert row.p50 == pytest.approx(3_100 / 15_000) and row.note == "ctxd 4.8x faster"
    assert rep.get_derived("cmp.turn.lmdb_vs_agents_sqlite.h4000") is None  # neither side ran
    assert rep.get_derived("cmp.turn.s3_vs_agents_sqlite.h10").p50 is None
    assert rep.get_derived("growth.turn.lmdb").p50 == pytest.approx(1.1)
    assert rep.get_derived("growth.peer.agents_sqlite.turn").p50 == pytest.approx(37.5)
    assert rep.get_derived("growth.incremental.lmdb").p50 == pytest.approx(1.2)
    assert rep.get_derived("growth.incremental.s3") is None  # no S3 row at all
    assert rep.get_derived("growth.index.create.s3_nolist").p50 == pytest.approx(0.9)
    bytes_growth = rep.get_derived("growth.index.bytes_per_create.s3_nolist")
    assert bytes_growth is None

    checks = {c.name: c for c in rep.checks}
    assert checks["target.turn.vs_agents.h1000"].value == pytest.approx(15_000 / 3_100)
    assert checks["target.turn.vs_agents.h1000"].met is True
    assert checks["target.turn.vs_agents.h10000"].met is True
    assert checks["target.turn.growth.lmdb"].met is True
    assert checks["target.turn_one_call.vs_agents.h1000"].value == pytest.approx(15_000 / 6_000)
    assert checks["target.turn_one_call.vs_agents.h1000"].met is False
    assert checks["target.turn_one_call.vs_agents.h10000"].met is None  # no 10,000 row
    one_call_growth = rep.get_derived("growth.turn.lmdb_one_call")
    assert one_call_growth.p50 is None and "turn_one_call.lmdb.h10000" in one_call_growth.note
    assert checks["target.turn.growth.s3"].met is None
    assert checks["target.incremental_read.growth.lmdb"].met is False
    slice_read = checks["target.slice_read.lmdb.h10000"]
    assert slice_read.value == pytest.approx(40.0) and slice_read.met is False  # us -> ms
    assert checks["target.index.create.growth"].met is True
    assert checks["target.index.bytes.growth"].met is None
    assert checks["target.ledger.recall.extractor.c1"].met is True
    assert checks["target.ledger.recall.expected.c1"].met is True
    assert checks["target.ledger.recall.extractor.c3"].met is False
    assert checks["target.ledger.recall.expected.c3"].value == pytest.approx(91.0)
    table = rep.table()
    assert "88.00%" in table and ">= 90.00%" in table and "40.00ms" in table


def test_missing_side_gives_na_row_only_at_measured_marks():
    rep = Report()
    _series(rep, compare.PEERS["agents_sqlite"], {10: 700.0, 1_000: 650.0})

    compare.add_comparisons(rep)

    names = [d.name for d in rep.derived]
    assert "cmp.append_turn.lmdb_vs_agents_sqlite.h1000" in names
    assert "cmp.append_turn.lmdb_vs_agents_sqlite.h4000" not in names
    row = rep.get_derived("cmp.append_turn.lmdb_vs_agents_sqlite.h10")
    assert row.p50 is None and row.note == "missing ctxd.append_turn.lmdb.h10"
    growth = rep.get_derived("growth.peer.agents_sqlite")
    assert growth.p50 is None and "peer.agents_sqlite.h10000" in growth.note
    assert "n/a" in rep.table()


def test_no_inputs_no_targets():
    rep = Report()
    rep.add(Result("lmdb.put", "lmdb", "us", 200.0, 300.0, 10))
    compare.add_comparisons(rep)
    assert rep.derived == [] and rep.checks == []


def test_peer_suite_records_skip_when_package_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "langgraph.checkpoint.sqlite", None)
    ctx = Context(quick=True)
    with ctx.cleanup:
        assert list(peers.langgraph_sqlite(ctx)) == []
    assert len(ctx.skips) == 1
    assert ctx.skips[0]["what"] == "peer.langgraph_sqlite"
    assert "pip install -e '.[bench]'" in ctx.skips[0]["reason"]


def test_run_suites_reports_skips():
    @register("test-skip-group")
    def skipping(ctx):
        ctx.skip("thing", "not installed")
        yield from ()

    rep = Report()
    assert run_suites(["test-skip-group"], Context(quick=True), rep, log=lambda m: None)
    assert rep.skipped == [
        {"suite": "test-skip-group:skipping", "what": "thing", "reason": "not installed"}
    ]
    assert "SKIPPED thing" in rep.table()
    assert rep.to_json()["skipped"] == rep.skipped


def test_turn_plan_keeps_each_conversation_near_its_mark():
    for mark, turns in ((10, 220), (1_000, 110), (10_000, 22)):
        convs, plan = peers._turn_plan(mark, turns)
        assert len(plan) == turns and max(plan) == convs - 1
        per_conv = max(plan.count(c) for c in range(convs))
        assert per_conv == 1 or 2 * per_conv <= mark * peers.GROWTH_BUDGET
    user, assistant = peers.turn_texts()
    assert len(user.encode()) == len(assistant.encode()) == peers.MESSAGE_BYTES


def test_write_floor_throughput_and_restore_targets():
    rep = Report()
    rep.add(Result("memory.floor.echo.unary", "memory", "us", 400.0, 800.0, 100))
    rep.add(Result("floor.echo_put.turn.lmdb", "contexts", "us", 520.0, 900.0, 100))
    rep.add(
        Result(
            "ctxd.memory.get", "memory", "us", 432.0, 900.0, 100, ratio_to="memory.floor.echo.unary"
        )
    )
    rep.add(Result("grpc.echo.tput.c16", "grpc", "calls/s", 4000.0, None, 100))
    rep.add(
        Result(
            "ctxd.append_turn.tput.c16",
            "process",
            "calls/s",
            1000.0,
            None,
            100,
            ratio_to="grpc.echo.tput.c16",
        )
    )
    rep.add(Result("ctxd.append_turn.lmdb.h10", "contexts", "us", 1300.0, 2000.0, 100))
    rep.add(Result("ctxd.restore.lmdb.h10000", "contexts", "us", 25_000.0, 30_000.0, 3))

    compare.add_comparisons(rep)

    checks = {c.name: c for c in rep.checks}
    assert checks["target.memory.get_vs_floor"].value == pytest.approx(1.08)
    assert checks["target.memory.get_vs_floor"].met is True
    assert checks["target.append_turn.vs_floor"].value == pytest.approx(1300 / 520)
    assert checks["target.append_turn.vs_floor"].met is False
    assert checks["target.append_turn.tput.c16"].value == pytest.approx(0.25)
    assert checks["target.append_turn.tput.c16"].met is False  # higher is better
    assert checks["target.restore.lmdb.h10000"].value == pytest.approx(25.0)
    assert checks["target.restore.lmdb.h10000"].met is True
    assert checks["target.memory.set.tput.c16"].met is None  # not measured in this run


def test_adk_session_targets():
    rep = Report()
    for mark, ctxd_p50, db_p50 in ((10, 2_000.0, 3_000.0), (10_000, 2_200.0, 40_000.0)):
        rep.add(
            Result(
                f"peer.adk_database.get_session.recent10.h{mark}", "adk", "us", db_p50, db_p50, 20
            )
        )
        rep.add(
            Result(
                f"ctxd.adk.get_session.recent10.lmdb.h{mark}",
                "adk",
                "us",
                ctxd_p50,
                ctxd_p50,
                20,
                ratio_to=f"peer.adk_database.get_session.recent10.h{mark}",
            )
        )
    rep.add(Result("peer.adk_database.list_sessions.n1000", "adk", "us", 50_000.0, 60_000.0, 30))
    rep.add(
        Result(
            "ctxd.adk.list_sessions.lmdb.n1000",
            "adk",
            "us",
            80_000.0,
            90_000.0,
            30,
            ratio_to="peer.adk_database.list_sessions.n1000",
        )
    )
    compare.add_comparisons(rep)
    checks = {c.name: c for c in rep.checks}
    vs_db = checks["target.adk.get_session.recent10.vs_database.h10000"]
    assert vs_db.value == pytest.approx(2_200 / 40_000) and vs_db.met is True
    assert checks["target.adk.get_session.recent10.growth"].value == pytest.approx(1.1)
    assert checks["target.adk.get_session.recent10.growth"].met is True
    listing = checks["target.adk.list_sessions.vs_database.n1000"]
    assert listing.value == pytest.approx(1.6) and listing.met is False
