"""Helpers the templates call: times, sizes, pretty JSON, tool calls paired
with their results, and the token chart as an SVG drawing (no script)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb


def now_ms() -> int:
    return int(time.time() * 1000)


def when(ms: int) -> str:
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def ttl_left(expires_ms: int, now: int) -> str:
    if not expires_ms:
        return "never expires"
    left = max(0, expires_ms - now) // 1000
    if left >= 86400:
        return f"{left // 86400}d {left % 86400 // 3600}h"
    if left >= 3600:
        return f"{left // 3600}h {left % 3600 // 60}m"
    return f"{left // 60}m {left % 60}s"


def size(n: int) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024 or unit == "MiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def num(n: int) -> str:
    return f"{n:,}"


def pretty_json(text: str) -> str:
    """JSON text indented for reading; text that is not JSON comes back as is."""
    if not text:
        return ""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        return text


def kind_name(kind: int) -> str:
    return {pb.CONTEXT_KIND_ROOT: "root", pb.CONTEXT_KIND_CONVERSATION: "conversation"}.get(
        kind, "-"
    )


def role(m: pb.Message) -> str:
    return m.WhichOneof("kind") or "unknown"


def text_of(m: pb.Message) -> str:
    k = role(m)
    if k == "tool":
        t = m.tool
        return pretty_json(t.json) if t.WhichOneof("content") == "json" else t.text
    return getattr(getattr(m, k), "text", "") if k != "unknown" else ""


def native(m: pb.Message) -> str:
    if not m.HasField("native"):
        return ""
    return pretty_json(m.native.data.decode("utf-8", "replace"))


@dataclass
class Item:
    """One transcript entry; an assistant message holds its calls, each with
    its result when the result is on the same page."""

    message: pb.Message
    calls: list[tuple[pb.ToolCall, pb.Message | None]] = field(default_factory=list)


def pair_tool_results(messages: list[pb.Message]) -> list[Item]:
    results = {m.tool.call_id: m for m in messages if role(m) == "tool"}
    paired: set[str] = set()
    items: list[Item] = []
    for m in messages:
        if role(m) == "tool" and m.id in paired:
            continue
        item = Item(m)
        if role(m) == "assistant":
            for call in m.assistant.tool_calls:
                result = results.get(call.id)
                if result is not None and result.id not in paired:
                    paired.add(result.id)
                    item.calls.append((call, result))
                else:
                    item.calls.append((call, None))
        items.append(item)
    return items


def percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "-"


# -- the token chart ----------------------------------------------------------------
W, H, PAD = 720, 260, 48


def _points(info, records, versions) -> list[tuple[int, int]]:
    if versions:
        pts = sorted((v.version, v.est_tokens) for v in versions)
    else:
        pts = [(0, 0)]
        for r in records:
            pts += [(max(r.version - 1, 0), r.tokens_before), (r.version, r.tokens_after)]
        pts.append((info.version, info.est_tokens))
    return sorted(set(pts))


def token_chart(info, records, versions) -> dict:
    """Shapes for the template's SVG: the estimate as a polyline, a dashed
    line per compaction, the model window as a horizontal line."""
    pts = _points(info, records, versions)
    max_x = max([p[0] for p in pts] + [1])
    top = max([p[1] for p in pts] + [info.model_window, 1]) * 1.1

    def x(v: float) -> float:
        return round(PAD + (W - 2 * PAD) * v / max_x, 1)

    def y(t: float) -> float:
        return round(H - PAD - (H - 2 * PAD) * t / top, 1)

    return {
        "width": W,
        "height": H,
        "line": " ".join(f"{x(a)},{y(b)}" for a, b in pts),
        "dots": [{"x": x(a), "y": y(b), "label": f"v{a}: {b} tokens"} for a, b in pts],
        "marks": [
            {"x": x(r.version), "label": f"{r.id}: {r.tokens_before} → {r.tokens_after}"}
            for r in records
        ],
        "window": y(info.model_window) if info.model_window else None,
        "window_label": f"window {info.model_window}",
        "axis": {"x0": PAD, "x1": W - PAD, "y0": H - PAD, "y1": PAD},
        "max_x": max_x,
        "top": int(top),
    }


def plan_status(status: int) -> str:
    return pb.PlanItemStatus.Name(status).removeprefix("PLAN_ITEM_STATUS_").lower()
