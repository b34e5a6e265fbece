"""The one JSON rule: what ctxd accepts wherever it takes JSON text.

Memory values, tool-call arguments, tool results and preflight verdicts are
all checked here, at the door, so every later stage (excerpts, summaries,
provider conversions) can rely on what it gets:

* strict RFC 8259: no ``NaN``/``Infinity``, no trailing garbage;
* nesting at most ``max_depth`` levels of arrays/objects (:data:`MAX_DEPTH`
  unless a setting says otherwise), checked on the text *before* parsing,
  so no document reaches a recursive parser deeper than that;
* strings are valid Unicode: a lone surrogate escape (``"\\ud800"``) is
  refused, since no UTF-8 text (a protobuf string, a stored record) can
  carry it;
* numbers are never converted: an integer of any length and ``1.10`` are
  accepted alike everywhere and come back byte for byte (the text is stored
  as sent; parsing only proves it is JSON).

Every refusal is :class:`~ctxd_sidecar.core.errors.InvalidArgument` naming the
field and, for nesting, the limit.
"""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from typing import Any

from ctxd_sidecar.core.errors import InvalidArgument

#: Deepest array/object nesting accepted by default (memory values follow
#: ``memory.max_depth``, whose default is the same).
MAX_DEPTH = 64


class _NonStandardConstant(ValueError):
    pass


class _DuplicateKey(ValueError):
    pass


class _NotFinite(ValueError):
    pass


def encode_compact(obj: Any) -> bytes:
    """``obj`` as compact UTF-8 JSON: the form ctxd stores its records in."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _finite(text: str) -> str:
    if not math.isfinite(float(text)):
        raise _NotFinite(text)
    return text


def _reject_constant(name: str) -> None:
    raise _NonStandardConstant(name)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


# Numbers stay text: no conversion, no digit limit, no float rounding.
_decoder = json.JSONDecoder(parse_constant=_reject_constant, parse_int=str, parse_float=str)
#: For documents ctxd reads itself (preflight): unique keys, finite numbers.
_strict_decoder = json.JSONDecoder(
    parse_constant=_reject_constant,
    parse_int=str,
    parse_float=_finite,
    object_pairs_hook=_no_duplicates,
)
#: A surrogate escape: the text may carry a lone one (checked after decoding).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def nesting_depth(text: str) -> int:
    """Deepest array/object nesting of JSON text (0 for a scalar); brackets
    inside strings do not count. Linear in the text, no recursion."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    if not brackets:
        return 0
    return max(accumulate(_STEP[c] for c in brackets))


def parse_json(
    text: str,
    *,
    field: str,
    max_depth: int = MAX_DEPTH,
    allow_empty: bool = False,
    strict: bool = False,
) -> Any:
    """Check ``text`` against the rule and return it parsed (numbers as their
    text). ``None`` for empty text when ``allow_empty``. ``strict`` also
    refuses duplicate keys and numbers beyond a double's range (documents
    ctxd reads itself, not values it only keeps)."""
    if not text:
        if allow_empty:
            return None
        raise InvalidArgument(field, "is empty; expected JSON text")
    # Brackets can only nest as deep as there are opening ones: count first (fast).
    if text.count("[") + text.count("{") > max_depth and nesting_depth(text) > max_depth:
        raise InvalidArgument(field, f"nests deeper than {max_depth} levels (the limit)")
    try:
        value = (_strict_decoder if strict else _decoder).decode(text)
    except _NonStandardConstant as exc:
        raise InvalidArgument(field, f"{exc} is not valid JSON (use null or a string)") from None
    except _NotFinite as exc:
        raise InvalidArgument(
            field, f"has the number {str(exc)[:32]} beyond a double's range"
        ) from None
    except _DuplicateKey as exc:
        raise InvalidArgument(field, f"has the key {str(exc)[:64]!r} twice") from None
    except RecursionError:  # brackets the depth count could not see (invalid text)
        raise InvalidArgument(field, f"nests deeper than {max_depth} levels (the limit)") from None
    except json.JSONDecodeError as exc:
        raise InvalidArgument(
            field, f"is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    check_unicode(value, text, field=field)
    return value


def check_unicode(value: Any, text: str, *, field: str) -> None:
    """Refuse ``value`` (decoded from ``text``) when a string in it holds a
    lone surrogate. Only text with a surrogate escape is checked, so valid
    documents cost one regex scan."""
    if not _SURROGATE_ESCAPE.search(text):
        return
    try:
        encode_compact(value)
    except UnicodeEncodeError:
        raise InvalidArgument(
            field,
            "has a lone surrogate escape (such as \\ud800); JSON strings must be valid "
            "Unicode (escape a pair, or send the character itself)",
        ) from None


def loads_bounded(text: str, *, field: str, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` for text read leniently (numbers converted, duplicate
    keys allowed) but with the same nesting bound and Unicode rule."""
    if text.count("[") + text.count("{") > max_depth and nesting_depth(text) > max_depth:
        raise InvalidArgument(field, f"nests deeper than {max_depth} levels (the limit)")
    try:
        value = json.loads(text)
    except RecursionError:
        raise InvalidArgument(field, f"nests deeper than {max_depth} levels (the limit)") from None
    check_unicode(value, text, field=field)
    return value


def validate_json(text: str, *, max_depth: int = MAX_DEPTH, field: str = "value_json") -> None:
    """Raise :class:`InvalidArgument` naming ``field`` unless ``text`` is strict JSON."""
    parse_json(text, field=field, max_depth=max_depth)
