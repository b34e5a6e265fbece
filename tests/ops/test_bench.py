"""Tests that keep ``python -m bench`` from rotting: harness unit checks plus a
``--quick`` end-to-end run (spawns the echo server, LMDB and moto)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bench.harness import interleaved_throughput, measure, throughput
from bench.report import Report, Result, percentile

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_percentile_interpolates():
    vals = [1, 2, 3, 4, 5]
    assert percentile(vals, 0) == 1
    assert percentile(vals, 50) == 3
    assert percentile(vals, 100) == 5
    assert percentile(vals, 25) == 2
    assert percentile([10, 20], 50) == 15


def test_measure_and_throughput_shapes():
    calls = []
    r = measure(lambda: calls.append(1), 50, 5, name="noop", group="t")
    assert (r.unit, r.n, len(calls)) == ("us", 50, 55)
    assert 0 <= r.p50 <= r.p99
    t = throughput(lambda: None, 2, 0.05, warmup_seconds=0.01, name="noop.tput", group="t")
    assert t.unit == "calls/s" and t.p99 is None and t.n > 0 and t.extra["callers"] == 2


def test_throughput_reraises_caller_error():
    def boom():
        raise ValueError("x")

    with pytest.raises(ValueError):
        throughput(boom, 2, 0.05, warmup_seconds=0, name="boom", group="t")


def test_interleaved_throughput_alternates_windows_and_pools_them():
    """Every round runs each workload once, in plan order, and a rate is
    all of a workload's calls over all of its windows."""
    order: list[str] = []

    def workload(tag: str):
        def call() -> None:
            if not order or order[-1] != tag:
                order.append(tag)

        return call

    a, b = interleaved_throughput(
        [("a", workload("a"), None, {"side": "floor"}), ("b", workload("b"), "a", {})],
        2,
        0.3,
        3,
        group="t",
        warmup_seconds=0.01,
    )
    assert order == ["a", "b"] * 3
    assert (a.name, b.name, b.ratio_to, a.extra["side"]) == ("a", "b", "a", "floor")
    assert a.extra["rounds"] == 3 and len(a.extra["round_rates"]) == 3
    assert a.p50 == pytest.approx(a.n / 0.3)
    assert a.extra["callers"] == 2 and a.unit == "calls/s"


def test_report_ratio_table_json(tmp_path):
    rep = Report()
    rep.add(Result("base", "g", "us", 100.0, 200.0, 10))
    rep.add(Result("x", "g", "us", 250.0, 300.0, 10, ratio_to="base"))
    rep.add(Result("y", "g", "calls/s", 5.0, None, 10, ratio_to="base"))  # unit mismatch
    rep.add(Result("z", "g", "us", 1.0, 1.0, 1, ratio_to="missing"))
    assert rep.ratio(rep.get("x")) == (2.5, 1.5)
    assert rep.ratio(rep.get("y")) == (None, None)
    table = rep.table()
    assert "2.50x / 1.50x" in table and "n/a" in table
    with pytest.raises(ValueError):
        rep.add(Result("x", "g", "us", 1.0, 1.0, 1))
    data = json.loads(rep.write_json(tmp_path / "r.json").read_text())
    assert [r["name"] for r in data["results"]] == ["base", "x", "y", "z"]
    assert data["results"][1]["ratio"] == 2.5


def test_quick_run_end_to_end(tmp_path):
    out = tmp_path / "results.json"
    # Its own process group: a run cut short takes the sidecars it started with it.
    bench = subprocess.Popen(
        [sys.executable, "-m", "bench", "--quick", "--json", str(out), "--tmpdir", str(tmp_path)],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = bench.communicate(timeout=300)
    finally:
        if bench.poll() is None:
            os.killpg(bench.pid, signal.SIGKILL)
            bench.communicate()
    assert bench.returncode == 0, stdout + stderr
    data = json.loads(out.read_text())
    assert data["failures"] == []
    names = {r["name"] for r in data["results"]}
    assert {
        "grpc.echo.unary",
        "grpc.echo.tput.c1",
        "grpc.echo.tput.c4",
        "grpc.echo.tput.c16",
        "lmdb.put",
        "lmdb.get",
        "s3.put_object",
        "s3.get_object",
        "ctxd.turn.lmdb.h1000",
        "ctxd.turn_one_call.lmdb.h1000",
        "memory.floor.echo_put.unary",
        "floor.echo_put.turn.lmdb",
        "ctxd.get_context.incremental.s3.h1000",
        "ctxd.get_context.default_client.lmdb.mib4",
        "ctxd.get_context.first_slice.lmdb.h1000",
        "ctxd.restore.lmdb.h1000",
        "ctxd.replicas.get_info.latest_after_write",
        "ctxd.replicas.append_turn.alternating",
        "ctxd.ledger.recall.expected.c3",
        "fidelity.recall.ctxd.extractive.c5",
        "fidelity.recall.langchain.model.c1",
        "ctxd.index.create.s3-nolist.n1000",
        "process.floor.echo.tput.c16",
        "ctxd.append_turn.tput.c16",
        "ui.floor.tail_read.lmdb.h2000",
        "ui.open_latest.lmdb.h2000",
        "ctxd.fork.lmdb.t1000",
        "ctxd.read_at.lmdb.t1000",
        "ctxd.adk.get_session.recent10.lmdb.h1000",
        "peer.adk_database.get_session.recent10.h1000",
        "ctxd.adk.list_sessions.lmdb.n100",
    } <= names
    checks = {c["name"]: c for c in data["checks"]}
    assert checks["target.ledger.recall.expected.c1"]["value"] is not None
    assert checks["target.ui.open_latest"]["value"] is not None
    assert checks["target.fork.flat"]["value"] is not None
    assert checks["target.fidelity.recall.ctxd.extractive.c5"]["value"] is not None
    for r in data["results"]:
        # a share may be 0 (a peer that keeps no command), a time or size never
        assert (r["p50"] >= 0 if r["unit"] == "%" else r["p50"] > 0) and r["n"] > 0, r


def test_profile_aggregate_splits_the_event_loop_from_the_writer():
    from bench.profile import aggregate, report

    loop = (
        "<module> (bench/ctxd_server.py:58);BaseEventLoop.run_forever (asyncio/base_events.py:607)"
    )
    raw = [
        # the loop waiting for work: not busy
        f"{loop};EpollSelector.select (selectors.py:468) 50",
        # ctxd code on the loop, and gRPC work on it
        f"{loop};Handle._run (asyncio/events.py:80);"
        "MemoryServicer.Get (ctxd_sidecar/server/memory_service.py:46);"
        "LmdbStore.get (ctxd_plugins/lmdb_store.py:100) 3",
        f"{loop};Handle._run (asyncio/events.py:80) 7",
        # the writer thread committing, and waiting
        "Thread.run (threading.py:982);LmdbStore._write_loop (ctxd_plugins/lmdb_store.py:158);"
        "LmdbStore._commit (ctxd_plugins/lmdb_store.py:179) 4",
        "Thread.run (threading.py:982);LmdbStore._write_loop (ctxd_plugins/lmdb_store.py:138) 9",
        "not a sample line",
    ]
    p = aggregate(raw, calls=2)
    assert (p.total, p.loop, p.loop_busy, p.loop_ours, p.commit) == (73, 60, 10, 3, 4)
    assert p.own["LmdbStore.get (ctxd_plugins/lmdb_store.py:100)"] == 3
    assert p.inclusive["MemoryServicer.Get (ctxd_sidecar/server/memory_service.py:46)"] == 3
    assert "Handle._run (asyncio/events.py:80)" not in p.inclusive  # not ctxd code
    text = report(p)
    assert "5.000 busy samples per call, of which ctxd code 1.500 (30%)" in text
    assert "LMDB writer committing: 2.000 samples per call" in text
    # Every thread sampled, not just the GIL holder: samples are not GIL time.
    assert "GIL held" not in report(aggregate(raw, calls=2, rate=200))
    # Sampled at 200/s holding the GIL: 73 samples over 2 calls is 182.5 ms a call.
    held = report(aggregate(raw, calls=2, rate=200, gil=True))
    assert "GIL held: 182500 us per call, 25000 us of it on the event loop, 7500 us in ctxd" in held


def _bench(tmp_path, *args):
    return subprocess.run(
        [sys.executable, "-m", "bench", *args, "--tmpdir", str(tmp_path)],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
        start_new_session=True,
    )


def test_merge_measures_one_group_again_and_keeps_the_others(tmp_path):
    out = tmp_path / "results.json"
    earlier = {
        "meta": {"mode": "quick", "groups": ["grpc", "process"], "started_at": "2026-01-01"},
        "results": [
            {
                "name": "grpc.echo.unary",
                "group": "grpc",
                "unit": "us",
                "p50": 500.0,
                "p99": 900.0,
                "n": 10,
                "extra": {},
                "ratio_to": None,
                "ratio": None,
            },
            {
                "name": "ctxd.cold_start",
                "group": "process",
                "unit": "s",
                "p50": 99.0,
                "p99": None,
                "n": 1,
                "extra": {},
                "ratio_to": None,
                "ratio": None,
            },
        ],
        "derived": [],
        "checks": [],
        "skipped": [],
        "failures": [
            {"suite": "process:ctxd_process", "error": "RuntimeError()", "traceback": ""},
            # The cross-group step of the earlier run: it runs again on the merged rows.
            {"suite": "compare", "error": "IndexError()", "traceback": ""},
        ],
    }
    out.write_text(json.dumps(earlier))
    run = _bench(tmp_path, "--quick", "--only", "process", "--merge", "--json", str(out))
    assert run.returncode == 0, run.stdout + run.stderr
    data = json.loads(out.read_text())
    assert data["failures"] == []
    rows = {r["name"]: r for r in data["results"]}
    assert rows["grpc.echo.unary"]["p50"] == 500.0  # kept as it was
    assert rows["ctxd.cold_start"]["p50"] != 99.0  # measured again
    assert "process.floor.echo.tput.c16" in rows
    assert [r["groups"] for r in data["meta"]["reruns"]] == [["process"]]
    assert data["meta"]["started_at"] == "2026-01-01"
    assert any(
        c["name"] == "target.process.cold_start" or c["source"] == "ctxd.cold_start"
        for c in data["checks"]
    )


def test_merge_refuses_a_run_of_the_other_mode_in_one_line(tmp_path):
    out = tmp_path / "results.json"
    out.write_text(json.dumps({"meta": {"mode": "full"}, "results": []}))
    run = _bench(tmp_path, "--quick", "--only", "process", "--merge", "--json", str(out))
    assert run.returncode == 2
    assert "holds a full run" in run.stderr and "Traceback" not in run.stderr
    missing = _bench(
        tmp_path, "--quick", "--only", "process", "--merge", "--json", str(tmp_path / "none.json")
    )
    assert missing.returncode == 2 and "does not exist" in missing.stderr
