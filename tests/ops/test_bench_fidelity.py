"""The fidelity bench (``python -m bench --only fidelity``) on a tiny corpus:
its rows and targets exist, the corpus is seeded and planted as documented,
and the docs draw the decay curve from its rows."""

from __future__ import annotations

import pytest

import bench.ctxd_fidelity as fidelity
from bench.fidelity_corpus import KINDS, SHAPES, corpus
from bench.figures import render
from bench.harness import Context, run_suites
from bench.report import Report


def test_the_corpus_is_seeded_long_tool_heavy_and_planted():
    a, b = corpus(6), corpus(6)
    assert [s.batches for s in a] == [s.batches for s in b]  # same seed, same sessions
    assert corpus(6, seed=7)[0].batches != a[0].batches
    assert [s.shape for s in a] == [*SHAPES, *SHAPES]
    assert fidelity.SESSIONS >= 200
    for s in a:
        messages = [m for batch in s.batches for m in batch]
        assert len(s.batches) == 5 and len(messages) >= 100
        tool_chars = sum(len(m.content) for m in messages if m.kind == "tool")
        assert tool_chars > sum(len(m.text) for m in messages) * 2  # tool-heavy
        planted = {k for m in messages for k, _ in m.planted}
        assert planted == set(KINDS)
        for m in messages:  # every planted artifact is where it is said to be
            where = m.text + m.content + "".join(a for _, _, a in m.calls) + m.name
            where += "".join(n for _, n, _ in m.calls)
            assert all(text in where for _, text in m.planted), m


@pytest.fixture
def results(monkeypatch):
    monkeypatch.setattr(fidelity, "QUICK_SESSIONS", 3)
    report = Report()
    assert run_suites(["fidelity"], Context(quick=True), report)
    fidelity.add_checks(report)
    return report


def test_the_group_reports_recall_per_system_kind_and_mark(results):
    names = {r.name for r in results.results}
    for system in fidelity.SYSTEMS:
        assert f"fidelity.shrink.{system}" in names
        for mark in (1, 3, 5):
            assert fidelity.recall_name(system, mark) in names
            assert {fidelity.recall_name(system, mark, k) for k in KINDS} <= names
    assert "fidelity.report_score.ctxd.extractive" in names
    for r in results.results:
        assert r.group == "fidelity" and 0 <= r.p50 <= 100 and r.extra["sessions"] == 3
    checks = {c.name: c for c in results.checks}
    for system in ("ctxd.extractive", "ctxd.model"):
        for mark in (1, 5):
            assert checks[f"target.fidelity.recall.{system}.c{mark}"].value is not None
    assert checks["target.fidelity.shrink.ctxd.extractive"].value is not None
    # The ledger is what carries the artifacts: without it recall falls.
    ctxd = results.get("fidelity.recall.ctxd.extractive.c5").p50
    assert results.get("fidelity.recall.summary_only.extractive.c5").p50 < ctxd


def test_the_docs_draw_the_decay_curve(results):
    md, charts = render(results.to_json())
    assert "fidelity-decay.svg" in charts and "<svg" in charts["fidelity-decay.svg"]
    assert "What survives successive compactions" in md
    assert "LangChain SummarizationMiddleware, stand-in model" in md
