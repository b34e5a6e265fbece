"""The last preflight verdict a runtime records on a context: a small JSON
object, checked with the one JSON rule plus unique keys and finite numbers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxd_sidecar.core.errors import InvalidArgument, LimitExceeded
from ctxd_sidecar.core.jsonvalue import parse_json


@dataclass(frozen=True)
class Preflight:
    """A validated preflight verdict: the text as sent and its parsed object."""

    json_text: str
    value: dict[str, Any]


def validate_preflight(
    verdict_json: str,
    *,
    max_bytes: int = 16 * 1024,
    max_depth: int = 32,
    field_name: str = "verdict_json",
) -> Preflight:
    """Check a preflight verdict: a JSON object, strict, within the size cap.

    Strict means the one JSON rule (:mod:`ctxd_sidecar.core.jsonvalue`) and no
    duplicate keys, numbers within a double's range. The text is kept as sent (key order is the
    caller's); the size cap counts its UTF-8 bytes.
    """
    if not isinstance(verdict_json, str) or not verdict_json.strip():
        raise InvalidArgument(field_name, 'must be a JSON object, e.g. {"intent": "..."}')
    size = len(verdict_json.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise LimitExceeded(
            "plan.max_preflight_bytes",
            max_bytes,
            f"{field_name} is {size} bytes; the limit is {max_bytes} (plan.max_preflight_bytes)",
        )
    value = parse_json(verdict_json, field=field_name, max_depth=max_depth, strict=True)
    if not isinstance(value, dict):
        kind = "an array" if isinstance(value, list) else "a scalar"
        raise InvalidArgument(field_name, f"must be a JSON object, not {kind}")
    return Preflight(json_text=verdict_json, value=value)
