"""The checks ``ctxd contexts import`` makes on a whole file before it
writes anything: every header field of the right type and range, message
counts matching, no context twice. Each failure is one line naming the line
number and the field, so a refused file is fixed at the place it is wrong."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format

from ctxd_sidecar.admin.connect import AdminError
from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.core.contexts.validate import (
    CONTEXT_ID_RE,
    MAX_MODEL_NAME,
    MAX_PRINCIPAL,
    MAX_TASK,
)

#: The largest model_window AppendTurn accepts (ctxd_sidecar.core.contexts.turns).
MAX_MODEL_WINDOW = 100_000_000
_TEXT_LIMITS = {"principal": MAX_PRINCIPAL, "task": MAX_TASK, "model": MAX_MODEL_NAME}


def _bad(n: int, field: str, why: str, value: Any) -> AdminError:
    shown = repr(value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return AdminError(f"line {n}: field {field!r} {why} (got {shown})", 2)


def _whole(n: int, obj: dict, field: str, *, high: int | None = None) -> None:
    value = obj.get(field)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _bad(n, field, "must be a whole number of at least 0", value)
    if high is not None and value > high:
        raise _bad(n, field, f"must be at most {high}", value)


def _message(n: int, obj: dict, field: str, cls) -> None:
    value = obj.get(field)
    if value is None:
        return
    if not isinstance(value, dict):
        raise _bad(n, field, "must be an object", value)
    try:
        json_format.ParseDict(value, cls())
    except (json_format.ParseError, TypeError, ValueError) as exc:
        why = f"is not a ctxd {cls.__name__} ({exc})"
        raise AdminError(f"line {n}: field {field!r} {why}", 2) from None


def header(n: int, obj: dict) -> None:
    """Check one context header (line ``n``); AdminError(code 2) if wrong."""
    cid = obj.get("id")
    if not isinstance(cid, str) or not CONTEXT_ID_RE.fullmatch(cid):
        raise _bad(n, "id", "must be a context id (letters, digits, '._:-', at most 128)", cid)
    for field in ("kind", "preflight", *_TEXT_LIMITS):
        value = obj.get(field)
        if value is not None and not isinstance(value, str):
            raise _bad(n, field, "must be a string", value)
        if field in _TEXT_LIMITS and value and len(value) > _TEXT_LIMITS[field]:
            raise _bad(n, field, f"must be at most {_TEXT_LIMITS[field]} characters", value)
    for field in ("version", "folded", "messages"):
        _whole(n, obj, field)
    _whole(n, obj, "model_window", high=MAX_MODEL_WINDOW)
    _message(n, obj, "summary", pb.Summary)
    _message(n, obj, "plan", pb.Plan)
    skills = obj.get("skills")
    if skills is not None and not isinstance(skills, list):
        raise _bad(n, "skills", "must be a list", skills)


def archive(n: int, obj: dict) -> list[pb.Message]:
    """The header's folded messages (``archive``): exactly ``m1..m{folded}``."""
    value = obj.get("archive")
    if value is None:
        return []
    if not isinstance(value, list):
        raise _bad(n, "archive", "must be a list of messages", value)
    out = []
    for i, m in enumerate(value):
        try:
            out.append(json_format.ParseDict(m, pb.Message()))
        except (json_format.ParseError, TypeError, ValueError, AttributeError) as exc:
            why = f"item {i} is not a ctxd Message ({exc})"
            raise AdminError(f"line {n}: field 'archive' {why}", 2) from None
    want = [f"m{i}" for i in range(1, int(obj.get("folded") or 0) + 1)]
    if [m.id for m in out] != want:
        raise _bad(n, "archive", f"must hold the folded messages m1..m{len(want)}", value)
    return out
