"""The system-prompt template grammar, apart from prompt assembly.

Configuration checks ``prompt.template_file`` at start-up with
:func:`load_template`; keeping the grammar here lets :mod:`ctxd_sidecar.config`
do that without importing the domain (:mod:`ctxd_sidecar.core.prompt` imports the
config, not the other way round).
"""

from __future__ import annotations

import importlib.resources
import re
from dataclasses import dataclass

STABLE_FIELDS = frozenset({"instruction", "agent", "skills", "loaded_skills"})
VOLATILE_FIELDS = frozenset({"summary", "plan"})
_COMMENT_RE = re.compile(r"\{\{!--.*?--\}\}|\{\{![^}]*\}\}", re.DOTALL)
FIELD_RE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_BLOCK_SPLIT_RE = re.compile(r"\n[ \t]*\n")
#: Largest template file accepted.
MAX_TEMPLATE_BYTES = 256 * 1024


@dataclass(frozen=True)
class Template:
    """A parsed template: blocks of the stable prefix, then blocks of the tail."""

    prefix: tuple[str, ...]
    tail: tuple[str, ...]
    source: str

    @classmethod
    def parse(cls, text: str, source: str = "template") -> Template:
        body = _COMMENT_RE.sub("", text)
        if "{{" in FIELD_RE.sub("", body):
            raise ValueError(f"{source}: unbalanced '{{{{' (placeholders are {{{{ name }}}})")
        blocks = [b.strip("\n") for b in _BLOCK_SPLIT_RE.split(body)]
        blocks = [b for b in blocks if b.strip()]
        prefix: list[str] = []
        tail: list[str] = []
        for block in blocks:
            names = set(FIELD_RE.findall(block))
            unknown = names - STABLE_FIELDS - VOLATILE_FIELDS
            if unknown:
                known = ", ".join(sorted(STABLE_FIELDS | VOLATILE_FIELDS))
                raise ValueError(
                    f"{source}: unknown placeholder {{{{{sorted(unknown)[0]}}}}}; known: {known}"
                )
            if tail or names & VOLATILE_FIELDS:
                if names & STABLE_FIELDS:
                    raise ValueError(
                        f"{source}: {{{{{sorted(names & STABLE_FIELDS)[0]}}}}} must come before "
                        "{{summary}} and {{plan}} (the stable part of the prompt comes first)"
                    )
                tail.append(block)
            else:
                prefix.append(block)
        return cls(prefix=tuple(prefix), tail=tuple(tail), source=source)


def builtin_template() -> Template:
    source = importlib.resources.files("ctxd_sidecar").joinpath("prompts/system.md")
    text = source.read_text("utf-8")
    return Template.parse(text, "built-in template")


def load_template(path: str = "") -> Template:
    """The operator's template file (ValueError if unreadable or invalid), or the built-in one."""
    if not path:
        return builtin_template()
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_TEMPLATE_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"prompt.template_file: cannot read it ({exc.strerror})") from None
    if len(data) > MAX_TEMPLATE_BYTES:
        raise ValueError(f"prompt.template_file: larger than {MAX_TEMPLATE_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("prompt.template_file: not UTF-8 text") from None
    return Template.parse(text, "prompt.template_file")
