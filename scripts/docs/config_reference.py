"""The configuration reference page, generated from the settings schema.

Names, types, defaults and limits come from the pydantic models in
``ctxd_sidecar.config`` (and the tables installed plugins declare); the text
of each setting is its ``#:`` comment in the model's source, so the page
cannot drift from the code.
"""

from __future__ import annotations

import ast
import inspect
import json
import textwrap
import typing

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from ctxd_sidecar.config import Config


def field_comments(model: type[BaseModel]) -> dict[str, str]:
    """``#:`` comments above each field of ``model`` and its bases (Sphinx style)."""
    out: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or cls is BaseModel:
            continue
        try:
            lines, _ = inspect.getsourcelines(cls)
        except (OSError, TypeError):
            continue
        source = textwrap.dedent("".join(lines))
        src_lines = source.splitlines()
        for node in ast.parse(source).body[0].body:
            if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
                continue
            comment: list[str] = []
            i = node.lineno - 2
            while i >= 0 and src_lines[i].strip().startswith("#:"):
                comment.insert(0, src_lines[i].strip()[2:].strip())
                i -= 1
            if not comment:
                # a field sharing the comment of the field right above it
                prev = src_lines[node.lineno - 2].strip() if node.lineno >= 2 else ""
                if prev and not prev.startswith("#") and ":" in prev:
                    shared = out.get(prev.split(":")[0].strip())
                    if shared:
                        out[node.target.id] = shared
                continue
            out[node.target.id] = " ".join(comment)
    return out


def _type_name(info: FieldInfo) -> str:
    ann = info.annotation
    if typing.get_origin(ann) is typing.Literal:
        return " \\| ".join(f'`"{a}"`' for a in typing.get_args(ann))
    return getattr(ann, "__name__", str(ann))


def _limits(info: FieldInfo) -> str:
    parts = []
    for m in info.metadata:
        for attr, sign in (("gt", ">"), ("ge", "≥"), ("lt", "<"), ("le", "≤")):
            v = getattr(m, attr, None)
            if v is not None:
                parts.append(f"{sign} {v:g}" if isinstance(v, float) else f"{sign} {v}")
    return ", ".join(parts)


def _default(info: FieldInfo) -> str:
    if info.default_factory is not None:
        return ""
    value = info.default
    if isinstance(value, str):
        return f'`"{value}"`' if value else '`""`'
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and value >= 10_000:
        return f"`{value}` ({value:,})".replace(",", " ")
    return f"`{json.dumps(value)}`"


def _rows(model: type[BaseModel], table: str) -> list[str]:
    comments = field_comments(model)
    rows = []
    for name, info in model.model_fields.items():
        if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
            continue  # a table of its own
        dotted = f"{table}.{name}" if table else name
        env = "CTXD_" + dotted.replace(".", "_").upper()
        text = comments.get(name, "").replace("|", "\\|")
        limits = _limits(info)
        rows.append(
            f"| `{dotted}` | {_type_name(info)} | {_default(info)} | {limits} | `{env}` | {text} |"
        )
    return rows


HEADER = [
    "| setting | type | default | limits | environment | meaning |",
    "|---|---|---|---|---|---|",
]


def tables(plugin_tables: bool = True) -> list[tuple[str, type[BaseModel]]]:
    """(dotted name, model) of the server, its core tables and plugins' tables."""
    out: list[tuple[str, type[BaseModel]]] = [("", Config)]
    for name, info in Config.model_fields.items():
        ann = info.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out.append((name, ann))
    if plugin_tables:
        from ctxd_sidecar.plugin.manager import each_result, plugin_manager

        for _plugin, declared in each_result(plugin_manager(), "ctxd_config_tables"):
            for t in declared or []:
                out.append((t.name, t.model))
    return out


def render() -> str:
    """The reference as Markdown: one table per configuration table."""
    lines: list[str] = []
    for table, model in tables():
        title = "Server (top-level keys)" if not table else f"`[{table}]`"
        lines += [f"### {title}", ""]
        doc = inspect.getdoc(model) or ""
        if table and doc and not doc.startswith("A config table"):
            lines += [doc.split("\n\n")[0], ""]
        lines += HEADER + _rows(model, table) + [""]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render())
