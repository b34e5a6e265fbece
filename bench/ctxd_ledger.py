"""Artifact recall through compaction: the domain pipeline, without gRPC.

On ``bench/transcripts/ops_session.json`` (a coding/ops conversation; see
``make_ops_session.py``) this runs what a compaction does: cut
(``keep_last`` 4) → extractive summary (``ctxd_plugins.extractive_summariser``)
+ artifact ledger → merged summary; the slice text is the rendered summary
block followed by the kept messages as a provider sees them (texts, tool
call names and argument JSON, tool results).

Recall = the share of artifacts that appear verbatim in the slice text,
against two ground truths: every artifact the ledger extractor finds in the
whole transcript so far (uncapped, nothing merged away), and the
hand-listed ``expected`` artifacts of the generator. Measured after 1
compaction (base rounds) and after 3 (more rounds appended before each
later compaction), with the ledger's rendered size. Goal: ≥ 95 % after
one, ≥ 90 % after three, within the default cap.

``run()`` returns the figures (default cap); ``python -m bench.ctxd_ledger``
prints them, and for comparison those under :data:`REFERENCE_CAP`. In the
suite (group ``ledger``) they are rows: ``ctxd.ledger.recall.<truth>.c<n>``
(%, truth ``extractor`` or ``expected``) and ``ctxd.ledger.bytes.c<n>`` (B)
after 1 and 3 compactions. The pipeline is deterministic and takes about a
second, so quick mode runs it whole.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.harness import Context, Result, register
from ctxd_plugins.extractive_summariser import extract as extractive
from ctxd_sidecar.core.compaction import MessageData, ToolCallData, merge, plan_cut
from ctxd_sidecar.core.compaction.ledger import (
    DEFAULT_LEDGER_CAP,
    Ledger,
    LedgerCap,
    message_artifacts,
)
from ctxd_sidecar.core.compaction.summary import Summary

TRANSCRIPT = Path(__file__).parent / "transcripts" / "ops_session.json"
KEEP_LAST = 4
COMPACTIONS = 3
GOALS = {1: 0.95, 3: 0.90}
GROUP = "ledger"
TRUTHS = ("extractor", "expected")
#: A tighter cap reported for comparison (fewer items, same bytes).
REFERENCE_CAP = LedgerCap(items=200, bytes=8 * 1024)


def load(path: Path = TRANSCRIPT) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def _message(d: dict[str, Any], seq: int) -> MessageData:
    calls = tuple(
        ToolCallData(c["id"], c["name"], c["arguments_json"]) for c in d.get("tool_calls", [])
    )
    return MessageData(
        d["kind"],
        f"m{seq}",
        text=d.get("text", ""),
        tool_calls=calls,
        call_id=d.get("call_id", ""),
        name=d.get("name", ""),
        content=d.get("content", ""),
        is_error=bool(d.get("is_error", False)),
        seq=seq,
    )


def _kept_text(m: MessageData) -> str:
    parts = [m.text] if m.text else []
    parts += [f"{c.name} {c.arguments_json}" for c in m.tool_calls]
    if m.content:
        parts.append(m.content)
    return "\n".join(parts)


def slice_text(summary: Summary, kept: list[MessageData]) -> str:
    return "\n".join([summary.render(), *(_kept_text(m) for m in kept)])


def _recall(wanted: set[str], text: str) -> float:
    return sum(1 for w in wanted if w in text) / len(wanted) if wanted else 1.0


def run(path: Path = TRANSCRIPT, cap: LedgerCap = DEFAULT_LEDGER_CAP) -> dict[str, Any]:
    data = load(path)
    base, extra = data["base_rounds"], data["extra_rounds"]
    per_later = extra // (COMPACTIONS - 1)
    batches = [data["rounds"][:base]]
    batches += [
        data["rounds"][base + k * per_later : base + (k + 1) * per_later]
        for k in range(COMPACTIONS - 1)
    ]
    messages: list[MessageData] = []  # the live transcript (kept part)
    everything: list[MessageData] = []
    expected: list[dict[str, str]] = []
    summary = Summary()
    figures: dict[str, Any] = {"transcript": path.name, "keep_last": KEEP_LAST, "cap": {
        "items": cap.items, "bytes": cap.bytes}, "compactions": []}  # fmt: skip
    for k, batch in enumerate(batches, start=1):
        for round_ in batch:
            for d in round_:
                m = _message(d, len(everything))
                messages.append(m)
                everything.append(m)
        expected += data["expected"][len(expected) : len(expected) + len(batch)]
        cut = plan_cut(messages, KEEP_LAST)
        if not hasattr(cut, "fold"):
            raise RuntimeError(f"compaction {k} declined: {cut.reason}")
        folded, kept = messages[: cut.fold], messages[cut.fold :]
        addition = extractive(folded)
        addition.covers_messages = len(folded)
        summary = merge(summary, addition, folded=folded, ledger_cap=cap, now_ms=k)
        messages = kept
        text = slice_text(summary, kept)
        truth = {t.strip() for m in everything for _, t in message_artifacts(m) if t.strip()}
        hand = {v for row in expected for v in row.values()}
        no_ledger = slice_text(Summary(**{**summary.__dict__, "ledger": Ledger()}), kept)
        figures["compactions"].append(
            {
                "n": k,
                "messages": len(everything),
                "folded": len(folded),
                "kept": len(kept),
                "recall_extractor": round(_recall(truth, text), 4),
                "recall_expected": round(_recall(hand, text), 4),
                "recall_expected_without_ledger": round(_recall(hand, no_ledger), 4),
                "artifacts_extractor": len(truth),
                "artifacts_expected": len(hand),
                "ledger_items": len(summary.ledger),
                "ledger_bytes": summary.ledger.byte_size(),
                "summary_bytes": len(summary.render().encode("utf-8")),
            }
        )
    rows = figures["compactions"]
    figures["goals_met"] = all(
        min(rows[n - 1]["recall_extractor"], rows[n - 1]["recall_expected"]) >= goal
        for n, goal in GOALS.items()
    ) and all(r["ledger_bytes"] <= cap.bytes and r["ledger_items"] <= cap.items for r in rows)
    return figures


def recall_name(truth: str, compactions: int) -> str:
    return f"ctxd.ledger.recall.{truth}.c{compactions}"


def bytes_name(compactions: int) -> str:
    return f"ctxd.ledger.bytes.c{compactions}"


@register(GROUP)
def ledger_suite(ctx: Context) -> Iterator[Result]:
    """Recall against both ground truths and the ledger's size, after 1 and 3 compactions."""
    figures = run()
    common = {"transcript": figures["transcript"], "keep_last": KEEP_LAST, "cap": figures["cap"]}
    for r in figures["compactions"]:
        if r["n"] not in GOALS:
            continue
        extra = {**common, "messages": r["messages"], "ledger_items": r["ledger_items"]}
        for truth in TRUTHS:
            yield Result(
                recall_name(truth, r["n"]), GROUP, "%", 100.0 * r[f"recall_{truth}"], None,
                r[f"artifacts_{truth}"], {**extra, "ground_truth": truth},
            )  # fmt: skip
        extra["summary_bytes"] = r["summary_bytes"]
        extra["recall_expected_without_ledger_pct"] = 100.0 * r["recall_expected_without_ledger"]
        yield Result(bytes_name(r["n"]), GROUP, "B", float(r["ledger_bytes"]), None, 1, extra)


def main() -> None:
    _print(run())
    _print(run(cap=REFERENCE_CAP), "reference, ")


def _print(figures: dict[str, Any], label: str = "") -> None:
    cap = figures["cap"]
    print(f"ledger recall on {figures['transcript']} (keep_last {figures['keep_last']}, "
          f"{label}cap {cap['items']} items / {cap['bytes']} bytes)")  # fmt: skip
    for r in figures["compactions"]:
        print(
            f"after {r['n']} compaction(s): {r['messages']} messages, folded {r['folded']}, "
            f"kept {r['kept']}; recall extractor {r['recall_extractor']:.1%} "
            f"(of {r['artifacts_extractor']}), expected {r['recall_expected']:.1%} "
            f"(of {r['artifacts_expected']}; {r['recall_expected_without_ledger']:.1%} without "
            f"the ledger); ledger {r['ledger_items']} items, {r['ledger_bytes']} bytes; "
            f"summary block {r['summary_bytes']} bytes"
        )
    print("goals met" if figures["goals_met"] else "goals NOT met")


if __name__ == "__main__":
    main()
