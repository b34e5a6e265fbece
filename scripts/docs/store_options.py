"""The store URI options reference, generated from each built-in store's
options model (the pydantic schema the plugin door validates a URI's query
against before the store opens).

Names, types, defaults and limits come from the model; the text of each
option is its ``#:`` comment in the model's source. ``tests/ops/test_docs.py``
holds :data:`STORES` to the schemes the built-in plugins serve and each
model to the options its store really accepts.
"""

from __future__ import annotations

import importlib
import inspect
import json
import typing
from types import NoneType, UnionType

from config_reference import _limits, field_comments
from pydantic import BaseModel
from pydantic.fields import FieldInfo

#: (scheme, the options model as ``module:name``, an example URI).
STORES = (
    ("memory", "ctxd_sidecar.plugin:StoreOptions", "memory://"),
    ("lmdb", "ctxd_plugins.lmdb_store:LmdbOptions", "lmdb:///var/lib/ctxd?map_size=16GiB"),
    (
        "s3",
        "ctxd_plugins.s3:S3Options",
        "s3://my-bucket/ctxd?endpoint_url=http://minio:9000&addressing_style=path",
    ),
    (
        "postgres",
        "ctxd_plugins.postgres.options:PostgresOptions",
        "postgres://ctxd@db:5432/agents?sslmode=verify-full&pool_size=20",
    ),
)


def model_of(path: str) -> type[BaseModel]:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def option_name(name: str, info: FieldInfo) -> str:
    """The name written in the URI (a field's alias where it has one)."""
    return info.alias or name


def _type(annotation: object) -> str:
    if typing.get_origin(annotation) is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in typing.get_args(annotation))
    if typing.get_origin(annotation) in (typing.Union, UnionType):
        return " \\| ".join(_type(a) for a in typing.get_args(annotation) if a is not NoneType)
    return {bool: "`true` \\| `false`", int: "whole number", float: "number", str: "text"}.get(
        annotation, getattr(annotation, "__name__", str(annotation))
    )


def _default(info: FieldInfo) -> str:
    value = info.default
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and value >= 1 << 30 and value % (1 << 30) == 0:
        return f"`{value >> 30}GiB`"
    return f"`{value}`" if isinstance(value, str) else f"`{json.dumps(value)}`"


def _limits_of(info: FieldInfo) -> str:
    parts = [_limits(info)] if _limits(info) else []
    parts += [f"matches `{m.pattern}`" for m in info.metadata if getattr(m, "pattern", None)]
    return ", ".join(parts)


def render() -> str:
    """One section per store: an example URI and a table of its options."""
    lines: list[str] = []
    for scheme, path, example in STORES:
        model = model_of(path)
        lines += [f"### `{scheme}://`", "", f"`{example}`", ""]
        if not model.model_fields:
            lines += ["No options: anything in the query is refused.", ""]
            continue
        doc = inspect.getdoc(model) or ""
        if doc and model.__module__ != "ctxd_sidecar.plugin.storehooks":
            lines += [doc.split("\n\n")[0], ""]
        comments = field_comments(model)
        lines += ["| option | value | default | limits | meaning |", "|---|---|---|---|---|"]
        for name, info in model.model_fields.items():
            text = comments.get(name, "").replace("|", "\\|")
            lines.append(
                f"| `{option_name(name, info)}` | {_type(info.annotation)} | {_default(info)} "
                f"| {_limits_of(info)} | {text} |"
            )
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(render())
