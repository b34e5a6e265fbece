"""Tables and charts of a ``python -m bench`` results file, for the docs.

``render(results)`` turns the JSON that :meth:`bench.report.Report.write_json`
writes into Markdown (the targets, the history growth, the floors and the
compaction decay as tables, every row in a folded table) and SVG charts
(history growth per store and against the peers, write and read latency
against their floors, recall of planted artifacts over successive
compactions).
The docs build calls it (``scripts/docs/hooks.py``), so published figures are
always one run's, drawn from its file, never pasted.

``python -m bench.figures RESULTS.json OUT_DIR`` writes the same to files
(``python -m bench --only G --merge`` measures some groups again into one).
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

MARKS = (10, 1_000, 4_000, 10_000)

#: (label, row name pattern) of the history-growth chart: one AppendTurn.
APPEND_SERIES = (
    ("ctxd AppendTurn, LMDB", "ctxd.append_turn.lmdb.h{mark}"),
    ("ctxd AppendTurn, S3 (moto)", "ctxd.append_turn.s3.h{mark}"),
    ("LangGraph + SqliteSaver step", "peer.langgraph_sqlite.h{mark}"),
    ("Agents SDK SQLiteSession add_items", "peer.agents_sqlite.h{mark}"),
)
#: A runtime's whole turn: write it and read what goes to the model next.
TURN_SERIES = (
    ("ctxd, one call, LMDB", "ctxd.turn_one_call.lmdb.h{mark}"),
    ("ctxd, one call, S3 (moto)", "ctxd.turn_one_call.s3.h{mark}"),
    ("ctxd, two calls, LMDB", "ctxd.turn.lmdb.h{mark}"),
    ("Agents SDK add_items + get_items", "peer.agents_sqlite.turn.h{mark}"),
)
#: (label, ctxd row, floor row): what a call costs against what it cannot beat.
FLOOR_PAIRS = (
    ("Memory.Get", "ctxd.memory.get", "memory.floor.echo.unary"),
    ("Memory.Set", "ctxd.memory.set", "memory.floor.echo_put.unary"),
    ("AppendTurn (10 messages)", "ctxd.append_turn.lmdb.h10", "floor.echo_put.turn.lmdb"),
    (
        "full slice read, 10,000 msgs (LMDB)",
        "ctxd.get_context.slice.lmdb.h10000",
        "floor.grpc.pages.lmdb.h10000",
    ),
    (
        "full slice read, 10,000 msgs (S3)",
        "ctxd.get_context.slice.s3.h10000",
        "floor.grpc.pages.s3.h10000",
    ),
)


def _rows(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in results.get("results", [])}


def _fmt(v: float | None, unit: str = "") -> str:
    if v is None:
        return "n/a"
    if unit == "us":
        return f"{v / 1000:.2f} ms" if v >= 1000 else f"{v:.0f} µs"
    if abs(v) >= 1000:
        return f"{v:,.0f}{(' ' + unit) if unit else ''}"
    return f"{v:.3g}{(' ' + unit) if unit else ''}"


def _table(header: list[str], rows: Iterable[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    return out + [""]


def _series(rows, pattern: str) -> list[tuple[int, float]]:
    out = []
    for mark in MARKS:
        r = rows.get(pattern.format(mark=mark))
        if r is not None and r.get("unit") == "us" and r.get("p50"):
            out.append((mark, r["p50"] / 1000))
    return out


def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buf.getvalue()


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "ctxd"  # the same file for the same figures
    matplotlib.rcParams["svg.fonttype"] = "none"
    import matplotlib.pyplot as plt

    return plt


def growth_chart(rows, series, title: str) -> str | None:
    """p50 latency (ms, log scale) against history length, one line per series."""
    drawn = [(label, _series(rows, pattern)) for label, pattern in series]
    drawn = [(label, points) for label, points in drawn if points]
    if not drawn:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for label, points in drawn:
        ax.plot([m for m, _ in points], [v for _, v in points], marker="o", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(MARKS, [f"{m:,}" for m in MARKS])
    ax.set_xlabel("messages of history")
    ax.set_ylabel("p50 per turn (ms)")
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize="small")
    return _svg(fig)


def floors_chart(rows) -> str | None:
    """Pairs of bars: each call's p50 and p99 beside its floor's."""
    pairs = [(label, rows[a], rows[b]) for label, a, b in FLOOR_PAIRS if a in rows and b in rows]
    if not pairs:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 0.6 + 0.75 * len(pairs)))
    ys = range(len(pairs))
    ax.barh([y + 0.2 for y in ys], [c["p50"] / 1000 for _, c, _f in pairs], 0.4, label="ctxd p50")
    ax.barh([y - 0.2 for y in ys], [f["p50"] / 1000 for _, _c, f in pairs], 0.4, label="floor p50")
    ax.set_yticks(list(ys), [label for label, _c, _f in pairs])
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("p50 (ms, log scale)")
    ax.set_title("Calls against their floors (same run)")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(fontsize="small")
    return _svg(fig)


#: (label, system) of the decay chart: recall of planted artifacts after n compactions.
DECAY_SERIES = (
    ("ctxd, extractive summariser", "ctxd.extractive"),
    ("ctxd, stand-in model", "ctxd.model"),
    ("summary only, extractive", "summary_only.extractive"),
    ("summary only, stand-in model", "summary_only.model"),
    ("LangChain SummarizationMiddleware, stand-in model", "langchain.model"),
)
DECAY_MARKS = (1, 3, 5)
DECAY_KINDS = ("path", "url", "command", "tool", "id", "number", "error")


def _recall(rows, system: str, mark: int, kind: str = "") -> float | None:
    r = rows.get(f"fidelity.recall.{system}{'.' + kind if kind else ''}.c{mark}")
    return None if r is None else r["p50"]


def decay_chart(rows) -> str | None:
    """Recall (%) of planted artifacts after 1, 3 and 5 compactions, per system."""
    drawn = []
    for label, system in DECAY_SERIES:
        points = [(m, _recall(rows, system, m)) for m in DECAY_MARKS]
        points = [(m, v) for m, v in points if v is not None]
        if points:
            drawn.append((label, points))
    if not drawn:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for label, points in drawn:
        ax.plot([m for m, _ in points], [v for _, v in points], marker="o", label=label)
    ax.set_xticks(DECAY_MARKS, [str(m) for m in DECAY_MARKS])
    ax.set_ylim(0, 105)
    ax.set_xlabel("successive compactions")
    ax.set_ylabel("planted artifacts still in context (%)")
    ax.set_title("What survives compaction")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return _svg(fig)


def _decay_section(rows, charts: dict[str, str]) -> list[str]:
    title = "What survives successive compactions"
    md = [f"## {title}", ""]
    svg = decay_chart(rows)
    if svg is None:
        return md + ["*No fidelity rows in the results file.*", ""]
    charts["fidelity-decay.svg"] = svg
    md += [
        "Recall of the artifacts planted in folded messages, after 1, 3 and 5 "
        "compactions of the generated sessions (`python -m bench --only fidelity`), "
        "and how much a fold shrinks what it replaces.",
        "",
        f"![{title}](benchmarks/fidelity-decay.svg)",
        "",
    ]
    md += _table(
        ["system", *(f"after {m}" for m in DECAY_MARKS), "span shrink"],
        (
            [label]
            + [_fmt(_recall(rows, system, m), "%") for m in DECAY_MARKS]
            + [_fmt(rows.get(f"fidelity.shrink.{system}", {}).get("p50"), "%")]
            for label, system in DECAY_SERIES
            if _recall(rows, system, 1) is not None
        ),
    )
    md += ["Per kind, after 5 compactions:", ""]
    md += _table(
        ["system", *DECAY_KINDS],
        (
            [label] + [_fmt(_recall(rows, system, 5, k), "%") for k in DECAY_KINDS]
            for label, system in DECAY_SERIES
            if _recall(rows, system, 5) is not None
        ),
    )
    return md


def render(results: dict[str, Any], source: str = "results.json") -> tuple[str, dict[str, str]]:
    """(Markdown, {chart file name: SVG text}); charts are linked as ``benchmarks/<name>``."""
    rows = _rows(results)
    meta = results.get("meta", {})
    env = meta.get("env", {})
    md: list[str] = []
    charts: dict[str, str] = {}
    md += [
        f"Figures of one run, drawn from `{source}`: "
        + ", ".join(
            f"{k} {v}"
            for k, v in (
                ("started", meta.get("started_at")),
                ("mode", meta.get("mode")),
                ("duration", f"{meta['duration_s']:.0f} s" if meta.get("duration_s") else None),
                ("Python", env.get("python")),
                ("CPUs", env.get("cpu_affinity", env.get("cpu_count"))),
                ("platform", env.get("platform")),
            )
            if v not in (None, "")
        )
        + ".",
        "",
    ]
    for rerun in meta.get("reruns", []):
        md += [
            f"Measured again in a later run (`--merge`), started {rerun.get('started_at')}: "
            + ", ".join(f"`{g}`" for g in rerun.get("groups", []))
            + "; the targets are computed over the merged rows.",
            "",
        ]
    checks = results.get("checks", [])
    if checks:
        md += ["## Targets", ""]
        md += _table(
            ["", "target", "measured", "limit"],
            (
                [
                    {True: "MET", False: "MISSED", None: "n/a"}[c.get("met")],
                    c["description"],
                    "n/a" if c.get("value") is None else f"{c['value']:.3g}{c.get('unit', '')}",
                    f"{c['op']} {c['limit']:g}{c.get('unit', '')}",
                ]
                for c in checks
            ),
        )
    for name, title, series, caption in (
        (
            "history-growth.svg",
            "One AppendTurn as the history grows",
            APPEND_SERIES,
            "A turn's cost against the conversation's length, ctxd on each store "
            "and the peers' durable write of the same turn.",
        ),
        (
            "whole-turn.svg",
            "A runtime's whole turn (write + read for the model)",
            TURN_SERIES,
            "The turn written and what goes to the model next read back.",
        ),
    ):
        svg = growth_chart(rows, series, title)
        md += [f"## {title}", "", caption, ""]
        if svg is None:
            md += ["*No rows for this chart in the results file.*", ""]
            continue
        charts[name] = svg
        md += [f"![{title}](benchmarks/{name})", ""]
        md += _table(
            ["series"] + [f"{m:,}" for m in MARKS],
            (
                [label]
                + [
                    _fmt(rows.get(p.format(mark=m), {}).get("p50"), "us")
                    if p.format(mark=m) in rows
                    else "n/a"
                    for m in MARKS
                ]
                for label, p in series
            ),
        )
    svg = floors_chart(rows)
    md += ["## Against the floors", ""]
    if svg is None:
        md += ["*No floor rows in the results file.*", ""]
    else:
        charts["floors.svg"] = svg
        md += ["![Calls against their floors](benchmarks/floors.svg)", ""]
        md += _table(
            ["call", "p50 / p99", "floor p50 / p99", "ratio p50"],
            (
                [
                    label,
                    f"{_fmt(rows[a]['p50'], 'us')} / {_fmt(rows[a]['p99'], 'us')}",
                    f"{_fmt(rows[b]['p50'], 'us')} / {_fmt(rows[b]['p99'], 'us')}",
                    f"{rows[a]['p50'] / rows[b]['p50']:.2f}×",
                ]
                for label, a, b in FLOOR_PAIRS
                if a in rows and b in rows
            ),
        )
    md += _decay_section(rows, charts)
    md += ['??? note "Every row of the run"', ""]
    md += [
        "    " + line
        for line in _table(
            ["group", "name", "p50", "p99", "n", "ratio p50", "vs"],
            (
                [
                    r["group"],
                    f"`{r['name']}`",
                    _fmt(r["p50"], r["unit"]),
                    _fmt(r.get("p99"), r["unit"]),
                    str(r.get("n", "")),
                    "" if r.get("ratio") is None else f"{r['ratio']:.2f}×",
                    r.get("ratio_to") or "",
                ]
                for r in results.get("results", [])
            ),
        )
    ]
    for s in results.get("skipped", []):
        md.append(f"- skipped {s.get('what')} ({s.get('suite')}): {s.get('reason')}")
    for f in results.get("failures", []):
        md.append(f"- failed {f.get('suite')}: {f.get('error')}")
    return "\n".join(md) + "\n", charts


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(
            "usage: python -m bench.figures RESULTS.json OUT_DIR",
            file=sys.stderr,
        )
        return 2
    md, charts = render(json.loads(Path(argv[0]).read_text()), source=Path(argv[0]).name)
    out = Path(argv[1])
    (out / "benchmarks").mkdir(parents=True, exist_ok=True)
    (out / "figures.md").write_text(md)
    for name, svg in charts.items():
        (out / "benchmarks" / name).write_text(svg)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
