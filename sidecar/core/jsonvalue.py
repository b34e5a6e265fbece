"""Strict JSON validation that never re-serialises.

Values are stored as the exact text the caller sent, so a large integer
(``12345678901234567890123``), ``1.10`` or an escaped code point comes back
byte for byte. The text is parsed only to prove it is JSON (RFC 8259): no
``NaN``/``Infinity``, no trailing garbage, nesting at most ``max_depth``.
Numbers are never converted (so no float rounding and no limit on the
number of digits).
"""

from __future__ import annotations

import json
import re
from itertools import accumulate

from sidecar.core.errors import InvalidArgument


class _NonStandardConstant(ValueError):
    pass


def _reject_constant(name: str) -> None:
    raise _NonStandardConstant(name)


_decoder = json.JSONDecoder(
    parse_constant=_reject_constant,
    parse_int=str,  # keep digits as text: no conversion, no digit limit
    parse_float=str,
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def validate_json(text: str, *, max_depth: int, field: str = "value_json") -> None:
    """Raise :class:`InvalidArgument` naming ``field`` unless ``text`` is strict JSON."""
    try:
        _decoder.decode(text)
    except _NonStandardConstant as exc:
        raise InvalidArgument(field, f"{exc} is not valid JSON (use null or a string)") from None
    except RecursionError:
        raise InvalidArgument(field, f"nesting deeper than {max_depth} levels") from None
    except json.JSONDecodeError as exc:
        raise InvalidArgument(
            field, f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    # Brackets can only nest as deep as there are opening ones: count first (fast).
    if text.count("[") + text.count("{") > max_depth and nesting_depth(text) > max_depth:
        raise InvalidArgument(field, f"nesting deeper than {max_depth} levels")


def nesting_depth(text: str) -> int:
    """Deepest array/object nesting of valid JSON text (0 for a scalar)."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    if not brackets:
        return 0
    return max(accumulate(_STEP[c] for c in brackets))
