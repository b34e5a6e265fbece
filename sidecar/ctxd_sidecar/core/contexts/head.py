"""The head of a context: every non-message field as of one version, and the
segments that hold its sealed messages (see :mod:`ctxd_sidecar.core.contexts`,
"Checkpoints"). Written by a checkpoint, read by a restore."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from ctxd_sidecar.core.compaction.summary import Summary
from ctxd_sidecar.core.contexts.model import ContextState, SegmentRef, ToolCall
from ctxd_sidecar.core.contexts.tokens import DEFAULT_MODEL_WINDOW, Calibration
from ctxd_sidecar.core.plan import Plan
from ctxd_sidecar.core.skills.model import SkillRef


def head_of(
    st: ContextState,
    segments: list[SegmentRef],
    sealed_through: int,
    dropped: list[SegmentRef],
    archive: list[tuple[SegmentRef, int]],
    *,
    hist: list[list[int]] | None = None,
    held: list[tuple[SegmentRef, int]] | None = None,
) -> dict[str, Any]:
    return {
        "format": 1,
        "id": st.id,
        "kind": st.kind,
        "gen": st.gen,
        "version": st.version,
        "created": st.created,
        "updated": st.updated,
        "turns": st.turns,
        "principal": st.principal,
        "task": st.task,
        "model": st.model,
        "model_window": st.model_window,
        "archived": st.archived,
        "next_seq": st.next_seq,
        "live_from": st.live_from,
        "sealed_through": sealed_through,
        "count": st.msg_count,
        "tokens": st.msg_tokens,
        "summary": st.summary.to_dict(),
        "skills": [[s.name, s.hash] for s in st.skills],
        "plan": st.plan.to_dict() if st.plan else None,
        "preflight": st.preflight,
        "calibration": st.calibration.to_dict(),
        "idem": [[k, v] for k, v in st.idem.items()],
        "segments": [s.to_list() for s in segments],
        "swept_through": st.swept_through,
        "dropped": [s.to_list() for s in dropped],
        "abandoned": [[c.id, c.name, c.arguments_json] for c in st.abandoned.values()],
        "reshaped_at": st.reshaped_at,
        "archive": [[*s.to_list(), ts] for s, ts in archive],
        "compactions": st.compactions,
        "cut": st.cut,
        "hist": st.hist if hist is None else hist,
        "held": [[*s.to_list(), ts] for s, ts in (st.held if held is None else held)],
        "lineage": st.lineage,
    }


def state_from_head(d: dict[str, Any], *, idem_cap: int) -> ContextState:
    st = ContextState(
        id=d["id"],
        kind=d["kind"],
        gen=d["gen"],
        version=int(d["version"]),
        created=int(d.get("created", 0)),
        updated=int(d.get("updated", 0)),
        turns=int(d.get("turns", 0)),
        principal=d.get("principal", ""),
        task=d.get("task", ""),
        model=d.get("model", ""),
        model_window=int(d.get("model_window", DEFAULT_MODEL_WINDOW)),
        archived=bool(d.get("archived", False)),
        next_seq=int(d.get("next_seq", 1)),
        summary=Summary.from_dict(d.get("summary") or {}),
        skills=[SkillRef(n, h) for n, h in d.get("skills", ())],
        plan=Plan.from_dict(d["plan"]) if d.get("plan") else None,
        preflight=d.get("preflight", ""),
        calibration=Calibration.from_dict(d.get("calibration")),
        idem=OrderedDict((k, v) for k, v in d.get("idem", ())),
        idem_cap=idem_cap,
        msg_count=int(d.get("count", 0)),
        msg_tokens=int(d.get("tokens", 0)),
        head_version=int(d["version"]),
        segments=[SegmentRef.from_list(s) for s in d.get("segments", ())],
        sealed_through=int(d.get("sealed_through", 0)),
        live_from=int(d.get("live_from", 1)),
        swept_through=int(d.get("swept_through", 0)),
        dropped=[SegmentRef.from_list(s) for s in d.get("dropped", ())],
        abandoned={c[0]: ToolCall(c[0], c[1], c[2]) for c in d.get("abandoned", ())},
        reshaped_at=int(d.get("reshaped_at", d["version"])),
        archive=[(SegmentRef.from_list(a[:4]), int(a[4])) for a in d.get("archive", ())],
        compactions=list(d.get("compactions", ())),
        cut=[[int(a), int(b)] for a, b in d.get("cut", ())],
        hist=[[int(v), int(ts)] for v, ts in d.get("hist", ())],
        held=[(SegmentRef.from_list(a[:4]), int(a[4])) for a in d.get("held", ())],
        lineage=[[str(i), str(g), int(v)] for i, g, v in d.get("lineage", ())],
    )
    st.refresh_blocks()
    return st
