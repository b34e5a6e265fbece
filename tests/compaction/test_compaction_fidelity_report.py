"""A fidelity report on every compaction, and no empty summary ever written,
over real gRPC on LMDB and S3 (moto server).

Every fold (plan/apply, Compact with a plugin, the automatic trigger) says how
many verbatim artifacts of the span it folded are still carried by the
summary or its ledger, by kind, and which were dropped; the score is a
metric. An empty, whitespace, ``{}``, truncated-JSON or placeholder summary,
from a summariser plugin or given to ApplyCompaction, is refused with a
typed reason, counted, and leaves the context as it was."""

from __future__ import annotations

import json

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from prometheus_client import REGISTRY
from pydantic import ValidationError

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.config import CompactionConfig
from tests.support.compaction import (
    Watcher,
    append,
    apply,
    get,
    openai_settings,
    plan,
    rpc_error,
    user,
)
from tests.support.fake_openai import FakeOpenAI

FILLER = "lorem ipsum dolor sit amet " * 8
#: Artifacts of one turn: a path, a URL, an error code, a ticket id, a number.
KINDS = {"path", "url", "error", "id", "number"}


@pytest.fixture(params=["lmdb", "s3"])
def uri(request, store_uri_for) -> str:
    return store_uri_for(request.param)


@pytest.fixture
def fake_openai():
    with FakeOpenAI() as server:
        yield server


def artifact_turn(sc, cid: str, i: int, **kw) -> None:
    append(
        sc,
        cid,
        user(f"turn {i}: open /srv/app/mod{i}.py and https://ci.example.com/run/{i} {FILLER}"),
        pb.Message(
            assistant=pb.AssistantMessage(
                text=f"saw E{1000 + i} on OPS-{100 + i}, order {70000 + i}. {FILLER}"
            )
        ),
        **kw,
    )


def sample(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def error_reason(err: grpc.RpcError) -> str:
    status = rpc_status.from_call(err)
    assert status is not None, "no rich status"
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return info.reason
    raise AssertionError("no ErrorInfo detail")


# -- the report ------------------------------------------------------------------------------
def test_apply_reports_every_artifact_of_the_span_carried(start_sidecar, uri):
    sc = start_sidecar(uri)
    for i in range(4):
        artifact_turn(sc, "fid", i)
    scored = sample("ctxd_compaction_fidelity_count", {"trigger": "runtime"})
    p = plan(sc, "fid", keep_last=2)
    r = apply(sc, "fid", p.plan_ref, {"goals": ["check the runs"], "facts": []})
    f = r.compaction.fidelity
    # Three folded turns, five artifacts each, all distinct.
    assert p.fold_count == 6 and f.artifacts == 15, f
    assert f.carried == f.artifacts and f.score == 1.0 and not f.dropped
    assert {k.kind for k in f.kinds} == KINDS
    assert all(k.artifacts == 3 and k.carried == 3 for k in f.kinds)
    assert f.artifacts_since_start == 15 and f.carried_since_start == 1.0
    # The record as listed with the context says the same.
    assert list(get(sc, "fid").context.compactions)[-1].fidelity == f
    assert sample("ctxd_compaction_fidelity_count", {"trigger": "runtime"}) == scored + 1
    # A span repeating artifacts the summary already carries adds none to
    # the count since the start: only turn 3's five are new.
    artifact_turn(sc, "fid", 0)
    artifact_turn(sc, "fid", 1)
    p = plan(sc, "fid", keep_last=2)  # folds turn 3 and the repeated turn 0
    f = apply(sc, "fid", p.plan_ref, "Checked the same runs.").compaction.fidelity
    assert f.artifacts == 10 and f.carried == 10
    assert f.artifacts_since_start == 20 and f.carried_since_start == 1.0


def test_a_small_ledger_drops_artifacts_and_the_report_names_them(start_sidecar, uri):
    sc = start_sidecar(uri, compaction__ledger_max_items=4)
    for i in range(4):
        artifact_turn(sc, "drop", i)
    dropped_paths = sample("ctxd_compaction_artifacts_dropped_total", {"kind": "path"})
    p = plan(sc, "drop", keep_last=2)
    # The answer itself carries one artifact the ledger cannot keep.
    r = apply(sc, "drop", p.plan_ref, {"facts": ["the first module is /srv/app/mod0.py"]})
    f = r.compaction.fidelity
    assert f.artifacts == 15 and f.carried == 5, f  # 4 in the ledger + 1 in the facts
    assert f.score == pytest.approx(5 / 15)
    by_kind = {k.kind: (k.artifacts, k.carried) for k in f.kinds}
    assert by_kind["path"] == (3, 1)  # mod0 through the answer, not the ledger
    # The first few dropped, oldest first, as a person reads them.
    assert len(f.dropped) == 5
    assert (f.dropped[0].kind, f.dropped[0].text) == ("url", "https://ci.example.com/run/0")
    assert all(d.text != "/srv/app/mod0.py" for d in f.dropped)
    assert sample("ctxd_compaction_artifacts_dropped_total", {"kind": "path"}) == (
        dropped_paths + 2
    )


def test_carried_since_start_decays_over_successive_folds(start_sidecar, uri):
    sc = start_sidecar(uri, compaction__ledger_max_items=8)
    shares = []
    for round_ in range(3):
        for i in range(3):
            artifact_turn(sc, "decay", round_ * 3 + i)
        p = plan(sc, "decay", keep_last=2)
        f = apply(sc, "decay", p.plan_ref, {"goals": [f"round {round_}"]}).compaction.fidelity
        shares.append((f.artifacts_since_start, f.carried_since_start))
    seen = [s for s, _ in shares]
    assert seen[0] < seen[1] < seen[2], shares
    carried = [c for _, c in shares]
    assert carried[0] > carried[1] > carried[2], shares  # the cap evicts the oldest
    assert carried[2] == pytest.approx(8 / seen[2])


def test_compact_and_the_automatic_trigger_report_fidelity(start_sidecar, uri):
    sc = start_sidecar(uri, contexts__keep_last=2)
    for i in range(3):
        artifact_turn(sc, "manual", i)
    r = sc.contexts.Compact(pb.CompactRequest(context_id="manual", keep_last=2), timeout=30)
    assert r.compacted and r.compaction.fidelity.artifacts == 10
    assert r.compaction.fidelity.score == 1.0
    # The automatic trigger: the watched event carries the record and its report.
    artifact_turn(sc, "auto", 0, model_window=100_000)
    w = Watcher(sc, "auto")
    for i in range(1, 8):
        artifact_turn(sc, "auto", i, model_window=1000)
    ev = w.next(pb.CONTEXT_EVENT_KIND_COMPACTION)
    w.close()
    f = ev.compaction.fidelity
    assert f.artifacts > 0 and f.carried == f.artifacts, f
    assert sample("ctxd_compaction_fidelity_count", {"trigger": "auto"}) >= 1


# -- never an empty summary ------------------------------------------------------------------
#: (answer, typed reason) for both paths.
REFUSED = [
    ("", "EMPTY_SUMMARY"),
    ("   \n\t ", "EMPTY_SUMMARY"),
    ("{}", "MALFORMED_ANSWER"),
    ('{"goals": ["migrate billing", "decisions": [', "MALFORMED_ANSWER"),
    (json.dumps({"goals": [], "decisions": [], "open": [], "facts": [], "narrative": ""}),
     "EMPTY_SUMMARY"),
    (json.dumps({"goals": ["..."], "facts": ["N/A"], "narrative": "TODO"}), "PLACEHOLDER_SUMMARY"),
    ("<summary>", "PLACEHOLDER_SUMMARY"),
    ("Summary goes here.", "PLACEHOLDER_SUMMARY"),
]  # fmt: skip


def test_apply_refuses_an_empty_summary_and_leaves_the_context(start_sidecar, uri):
    sc = start_sidecar(uri)
    for i in range(3):
        artifact_turn(sc, "guard", i)
    p = plan(sc, "guard", keep_last=2)
    before = get(sc, "guard")
    for answer, reason in REFUSED:
        labels = {"trigger": "runtime", "reason": reason.lower()}
        counted = sample("ctxd_compaction_summaries_refused_total", labels)
        err = rpc_error(apply, sc, "guard", p.plan_ref, answer)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, answer
        assert error_reason(err) == reason, (answer, err.details())
        assert sample("ctxd_compaction_summaries_refused_total", labels) == counted + 1
    assert get(sc, "guard") == before
    assert apply(sc, "guard", p.plan_ref, "Checked the runs.").folded == p.fold_count


def test_a_plugin_s_empty_summary_is_refused_and_leaves_the_context(
    start_sidecar, uri, fake_openai
):
    sc = start_sidecar(uri, **openai_settings(fake_openai))
    for i in range(3):
        artifact_turn(sc, "plug", i)
    before = get(sc, "plug")
    for answer, reason in REFUSED:
        # The plugin itself refuses an answer with no content at all.
        reason = "MALFORMED_ANSWER" if not answer.strip() else reason
        labels = {"trigger": "manual", "reason": reason.lower()}
        counted = sample("ctxd_compaction_summaries_refused_total", labels)
        fake_openai.answer = answer
        err = rpc_error(sc.contexts.Compact, pb.CompactRequest(context_id="plug", keep_last=2))
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, answer
        assert error_reason(err) == reason, (answer, err.details())
        assert sample("ctxd_compaction_summaries_refused_total", labels) == counted + 1
    assert get(sc, "plug") == before
    fake_openai.answer = json.dumps({"facts": ["checked the runs"]})
    assert sc.contexts.Compact(pb.CompactRequest(context_id="plug", keep_last=2)).compacted


# -- compaction.min_fidelity -----------------------------------------------------------------
def test_a_fold_below_min_fidelity_is_declined_on_both_paths(start_sidecar, uri, fake_openai):
    sc = start_sidecar(
        uri,
        compaction__ledger_max_items=4,
        compaction__min_fidelity=0.5,
        **openai_settings(fake_openai),
    )
    for i in range(4):
        artifact_turn(sc, "low", i)
    before = get(sc, "low")
    p = plan(sc, "low", keep_last=2)
    labels = {"trigger": "runtime", "reason": "low_fidelity"}
    counted = sample("ctxd_compaction_summaries_refused_total", labels)
    err = rpc_error(apply, sc, "low", p.plan_ref, "Checked the runs.")
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_reason(err) == "LOW_FIDELITY" and "4 of 15" in err.details(), err.details()
    assert sample("ctxd_compaction_summaries_refused_total", labels) == counted + 1
    fake_openai.answer = json.dumps({"facts": ["checked the runs"]})
    err = rpc_error(sc.contexts.Compact, pb.CompactRequest(context_id="low", keep_last=2))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_reason(err) == "LOW_FIDELITY", err.details()
    assert get(sc, "low") == before
    # An answer that carries what the ledger cannot clears the bar.
    urls = [f"https://ci.example.com/run/{i}" for i in range(3)]
    r = apply(sc, "low", p.plan_ref, {"facts": [*urls, "/srv/app/mod0.py", "/srv/app/mod1.py"]})
    assert r.compaction.fidelity.carried == 8 and r.compaction.fidelity.score >= 0.5


def test_min_fidelity_is_a_share():
    assert CompactionConfig().min_fidelity == 0.0  # off: no ordinary fold trips it
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValidationError, match="min_fidelity"):
            CompactionConfig(min_fidelity=bad)
