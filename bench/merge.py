"""Re-run some groups into an earlier run's JSON (``python -m bench --merge``).

A full run takes about half an hour on the 2-core machine; when one group
failed or changed, publishing its new figures should not need the other
groups measured again. The earlier run's rows of the groups not re-run are
kept as they were; ratios across groups and the targets are computed again
over the merged rows; ``meta["reruns"]`` says which groups were measured
when, so a reader can tell rows of different runs apart.
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any

from bench.report import Report, Result

_RESULT_FIELDS = {f.name for f in fields(Result)}


class MergeError(ValueError):
    """The earlier run cannot take these groups (missing file, other mode)."""


def _suite_group(suite: str) -> str:
    return suite.split(":", 1)[0]


def load_earlier(path: str | Path, groups: list[str], mode: str) -> dict[str, Any]:
    """Read the run to merge into; refuse what would mix unlike figures."""
    p = Path(path)
    try:
        earlier = json.loads(p.read_text())
    except FileNotFoundError:
        raise MergeError(f"--merge: {p} does not exist (run the full bench first)") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise MergeError(f"--merge: {p} is not a bench JSON report ({exc})") from None
    earlier_mode = earlier.get("meta", {}).get("mode")
    if earlier_mode != mode:
        raise MergeError(
            f"--merge: {p} holds a {earlier_mode} run; re-run its groups in the same mode "
            f"({'without' if earlier_mode == 'full' else 'with'} --quick)"
        )
    if not groups:
        raise MergeError("--merge needs --only GROUP: the groups to measure again")
    return earlier


def seed_report(report: Report, earlier: dict[str, Any], groups: list[str]) -> None:
    """Put the earlier run's rows of the other groups into ``report`` before the run."""
    rerun = set(groups)
    for row in earlier.get("results", []):
        if row.get("group") in rerun:
            continue
        report.add(Result(**{k: v for k, v in row.items() if k in _RESULT_FIELDS}))
    for key in ("failures", "skipped"):
        # The cross-group step ("compare") runs again over the merged rows.
        kept = [
            e
            for e in earlier.get(key, [])
            if _suite_group(e.get("suite", "")) not in rerun and e.get("suite") != "compare"
        ]
        getattr(report, key).extend(kept)
    meta = dict(earlier.get("meta", {}))
    meta.pop("env", None)
    reruns = list(meta.pop("reruns", []))
    reruns.append(
        {
            "groups": list(groups),
            "started_at": report.meta.get("started_at"),
            "argv": report.meta.get("argv"),
        }
    )
    all_groups = list(meta.get("groups", []))
    all_groups += [g for g in groups if g not in all_groups]
    report.meta = {**meta, "groups": all_groups, "reruns": reruns}


def note_duration(report: Report, seconds: float) -> None:
    """Record how long the re-run took, on its own entry, not the earlier run's."""
    reruns = report.meta.get("reruns")
    if reruns:
        reruns[-1]["duration_s"] = round(seconds, 2)
