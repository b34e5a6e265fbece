"""Output: aligned tables for people, JSON for scripts."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable, Sequence

from google.protobuf import json_format


def as_dict(msg) -> dict:
    return json_format.MessageToDict(
        msg, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )


def emit_json(obj, out=None) -> None:
    out = out or sys.stdout
    out.write(json.dumps(obj, ensure_ascii=False, sort_keys=True) + "\n")
    out.flush()


def when(ms: int) -> str:
    if not ms:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + "Z"


def short(text: str, width: int = 60) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def table(headers: Sequence[str], rows: Iterable[Sequence], out=None) -> None:
    out = out or sys.stdout
    rows = [[str(c) for c in r] for r in rows]
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    for r in [list(headers), *rows]:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")
    out.flush()


def enum_name(full: str, prefix: str) -> str:
    return full.removeprefix(prefix).lower()


def brief(m) -> tuple[str, str]:
    """A message's kind and a one-line text (70 characters at most)."""
    kind = m.WhichOneof("kind") or "?"
    body = getattr(m, kind) if kind != "?" else None
    if kind == "assistant":
        calls = ", ".join(f"{c.name}()" for c in body.tool_calls)
        text = " ".join(x for x in (body.text, calls and f"[calls {calls}]") if x)
    elif kind == "tool":
        content = body.json if body.WhichOneof("content") == "json" else body.text
        text = f"{body.name}{' ERROR' if body.is_error else ''}: {content}"
    else:
        text = getattr(body, "text", "")
    return kind, short(text, 70)
