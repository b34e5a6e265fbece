"""The prompt cache, measured: RecordUsage's cached-input and cache-write
counts move a conversation's cache figures (raw sums, the share derived),
the first report after a compaction is kept against what its CacheEffect
predicted, both are exported as Prometheus counters, survive a restart, and
counts no provider reports are INVALID_ARGUMENT with nothing changed (real
gRPC on LMDB)."""

from __future__ import annotations

import grpc
import pytest
from prometheus_client import REGISTRY

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from tests.support.contexts import append, assistant, bad_field, full, rpc_error, user

CID = "cache"


def _usage(stub, inp: int, cached: int | None = None, written: int | None = None, cid=CID):
    req = pb.RecordUsageRequest(context_id=cid, input_tokens=inp, model="claude-test")
    if cached is not None:
        req.cached_input_tokens = cached
    if written is not None:
        req.cache_write_tokens = written
    return stub.RecordUsage(req, timeout=10)


def _metric(name: str, **labels) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def _turns(stub, n: int, cid: str = CID) -> None:
    for i in range(n):
        append(stub, cid, user(f"question {i} " + "words " * 40), assistant(f"answer {i}"))


@pytest.fixture
def sc(start_sidecar, tmp_path):
    uri = f"lmdb://{tmp_path / 'cache'}?map_size=64MiB"
    running = start_sidecar(uri)
    running.extra["uri"] = uri
    return running


def test_scripted_usage_moves_the_conversation_figures_and_the_metrics(sc):
    stub = sc.contexts
    _turns(stub, 3)
    before = {
        n: _metric(n)
        for n in (
            "ctxd_usage_input_tokens_total",
            "ctxd_usage_cached_input_tokens_total",
            "ctxd_usage_cache_write_tokens_total",
        )
    }
    assert not full(stub, CID).HasField("cache_usage")  # nothing reported yet
    # A report without cache counts calibrates only.
    assert _usage(stub, 900).cache_usage.reports == 0
    first = _usage(stub, 1000, cached=0, written=800).cache_usage
    assert (first.reports, first.input_tokens, first.cached_input_tokens) == (1, 1000, 0)
    second = _usage(stub, 1200, cached=800, written=300).cache_usage
    assert (second.input_tokens, second.cached_input_tokens, second.cache_write_tokens) == (
        2200,
        800,
        1100,
    )
    assert second.cache_read_share == pytest.approx(800 / 2200)
    assert full(stub, CID).cache_usage == second
    assert _metric("ctxd_usage_input_tokens_total") - before[
        "ctxd_usage_input_tokens_total"
    ] == pytest.approx(2200)
    assert _metric("ctxd_usage_cached_input_tokens_total") - before[
        "ctxd_usage_cached_input_tokens_total"
    ] == pytest.approx(800)
    assert _metric("ctxd_usage_cache_write_tokens_total") - before[
        "ctxd_usage_cache_write_tokens_total"
    ] == pytest.approx(1100)


def test_the_first_report_after_a_compaction_is_kept_against_its_prediction(sc):
    stub = sc.contexts
    _turns(stub, 6)
    _usage(stub, 1500, cached=1000, written=100)
    done = stub.Compact(pb.CompactRequest(context_id=CID, keep_last=2), timeout=30)
    assert done.compacted, done.reason
    rec = done.compaction
    assert rec.cache_cost.predicted_write_tokens == done.cache.tokens_rewritten > 0
    assert not rec.cache_cost.reported
    predicted = _metric("ctxd_compaction_cache_write_predicted_tokens_total", trigger="manual")
    written = _metric("ctxd_compaction_cache_write_tokens_total", trigger="manual")
    _usage(stub, 700, cached=50, written=600)
    _usage(stub, 720, cached=650, written=10)  # the next one is not the compaction's
    cost = full(stub, CID).compactions[-1].cache_cost
    assert cost.reported and (cost.cache_write_tokens, cost.cached_input_tokens) == (600, 50)
    assert cost.input_tokens == 700
    assert cost.predicted_write_tokens == rec.cache_cost.predicted_write_tokens
    assert _metric(
        "ctxd_compaction_cache_write_predicted_tokens_total", trigger="manual"
    ) - predicted == pytest.approx(cost.predicted_write_tokens)
    assert _metric(
        "ctxd_compaction_cache_write_tokens_total", trigger="manual"
    ) - written == pytest.approx(600)


def test_the_figures_survive_a_restart(sc, start_sidecar):
    stub = sc.contexts
    _turns(stub, 2)
    want = _usage(stub, 1000, cached=600, written=200).cache_usage
    _turns(stub, 1)  # the next record carries them (as it carries calibration)
    sc.stop()
    again = start_sidecar(sc.extra["uri"])
    assert full(again.contexts, CID).cache_usage == want


@pytest.mark.parametrize(
    "inp, cached, written, field",
    [
        (100, -1, None, "cached_input_tokens"),
        (100, None, -5, "cache_write_tokens"),
        (100, 101, None, "cached_input_tokens"),
        (100, 60, 41, "cache_write_tokens"),
    ],
)
def test_counts_no_provider_reports_are_refused_and_change_nothing(sc, inp, cached, written, field):
    stub = sc.contexts
    _turns(stub, 1)
    held = _usage(stub, 500, cached=100, written=0).cache_usage
    err = rpc_error(_usage, stub, inp, cached, written)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_field(err) == field and "input_tokens" in err.details()
    assert full(stub, CID).cache_usage == held
