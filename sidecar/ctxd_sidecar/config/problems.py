"""One wording for what pydantic refuses: a setting of the configuration and
an option of a store's URI are described alike, naming the value given and
what it must be, so an operator reads one language in every refusal."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo

#: A value that did not parse: the value is shown, then what it must be.
PARSING = {
    "int_parsing": "a whole number",
    "int_from_float": "a whole number",
    "float_parsing": "a number",
    "bool_parsing": "true or false",
}
#: A value of the wrong type (from a TOML file, where types are given).
TYPES = {
    "int_type": "a whole number",
    "float_type": "a number",
    "finite_number": "a finite number",
    "bool_type": "true or false",
    "string_type": "a string",
    "model_type": "a table",
    "model_attributes_type": "a table",
    "dict_type": "a table",
}
BOUNDS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal"}


def describe(error: Mapping[str, Any], name: str, model: type[BaseModel]) -> str:
    """``error`` (one of ``ValidationError.errors()``) as a phrase that starts
    with ``name``; ``model`` is where the field's bounds are read. Unknown
    keys are the caller's to word: only it knows where they came from."""
    kind, ctx, value = error["type"], error.get("ctx") or {}, error.get("input")
    if kind in PARSING or (kind == "finite_number" and isinstance(value, str)):
        return f"{name}={value!r} must be {PARSING.get(kind) or TYPES[kind]}"
    if kind in TYPES:
        return f"{name} must be {TYPES[kind]}"
    if kind in BOUNDS:
        return f"{name} must be {bounds(field(model, error.get('loc', ())))}"
    if kind == "literal_error":
        return f"{name} must be {str(ctx.get('expected', '')).replace(chr(39), chr(34))}"
    msg = str(ctx["error"]) if kind == "value_error" and "error" in ctx else error["msg"]
    if not name or msg.startswith(name):
        return msg
    if msg.startswith("must"):
        return f"{name} {msg}"
    shown = f"={value!r}" if isinstance(value, (str, int, float)) else ""
    return f"{name}{shown}: {msg}"


def field(model: type[BaseModel], path: tuple) -> FieldInfo | None:
    """The field at ``path`` of ``model`` (nested models followed), or None."""
    info: FieldInfo | None = None
    for part in path:
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return None
        fields = model.model_fields
        info = fields.get(str(part)) or next(
            (f for f in fields.values() if f.alias == str(part)), None
        )
        if info is None:
            return None
        model = info.annotation  # type: ignore[assignment]
    return info


def bounds(info: FieldInfo | None) -> str:
    """What a number must be, read from the field's ``gt``/``ge``/``lt``/``le``."""
    lo: tuple[str, Any] | None = None
    hi: tuple[Any, str] | None = None
    for m in info.metadata if info is not None else ():
        if isinstance(m, annotated_types.Gt):
            lo = ("(", m.gt)
        elif isinstance(m, annotated_types.Ge):
            lo = ("[", m.ge)
        elif isinstance(m, annotated_types.Lt):
            hi = (m.lt, ")")
        elif isinstance(m, annotated_types.Le):
            hi = (m.le, "]")
    if lo and hi:
        return f"in {lo[0]}{lo[1]}, {hi[0]}{hi[1]}"
    if lo:
        if lo[1] == 0:
            return "positive" if lo[0] == "(" else "0 or more"
        return f"more than {lo[1]}" if lo[0] == "(" else f"at least {lo[1]}"
    if hi:
        return f"less than {hi[0]}" if hi[1] == ")" else f"at most {hi[0]}"
    return "in range"
