"""Reading skill text: ``@skill:`` references, front matter, descriptions."""

from __future__ import annotations

import re

#: ``@skill:<name>``: the name starts with a letter or digit and runs over
#: ``[A-Za-z0-9._-]``; a trailing ``.`` is sentence punctuation, not part of
#: it ("see @skill:deploy." names ``deploy``). The one grammar: a compaction
#: decides which skills it keeps with it too (ctxd_sidecar.core.compaction.skills). Catalogue names
#: with other characters can still be loaded explicitly but not referenced.
REFERENCE_PREFIX = "@skill:"
_REFERENCE_RE = re.compile(r"@skill:([A-Za-z0-9][A-Za-z0-9._-]*)")
_WHEN_RE = re.compile(r"\b(?:when to use|use when)\s*:\s*", re.IGNORECASE)
#: Longest description / when_to_use kept in the catalogue (one line each).
MAX_DESCRIPTION_CHARS = 1024


def find_references(text: str) -> list[str]:
    """Skill names referenced as ``@skill:<name>``, deduplicated, in order of appearance."""
    out: list[str] = []
    for match in _REFERENCE_RE.finditer(text):
        name = match.group(1).rstrip(".")
        if name and name not in out:
            out.append(name)
    return out


def parse_front_matter(text: str) -> dict[str, str]:
    """The ``key: value`` pairs of a leading ``---`` block (a small YAML subset).

    Handles plain and quoted scalars, and ``>`` / ``|`` blocks or indented
    continuation lines (joined with spaces). Anything else is ignored.
    """
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        return {}
    out: dict[str, str] = {}
    key: str | None = None
    for line in lines[1:]:
        if line.strip() in {"---", "..."}:
            return {k: _unquote(v.strip()) for k, v in out.items()}
        if key is not None and line[:1] in {" ", "\t"} and line.strip():
            out[key] = f"{out[key]} {line.strip()}".strip()
            continue
        name, sep, value = line.partition(":")
        if not sep or not name.strip() or name[:1] in {" ", "\t", "#", "-"}:
            key = None
            continue
        key = name.strip().lower()
        value = value.strip()
        out[key] = "" if value in {">", "|", ">-", "|-"} else value
    return {}  # no closing fence: not front matter


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in {'"', "'"}:
        return value[1:-1]
    return value


def one_line(text: str | None) -> str:
    line = " ".join((text or "").split())
    if len(line) > MAX_DESCRIPTION_CHARS:
        line = line[: MAX_DESCRIPTION_CHARS - 1] + "…"
    return line


def split_description(description: str | None) -> tuple[str, str]:
    """``(description, when_to_use)`` split at "When to use:" / "Use when:"."""
    text = one_line(description)
    match = _WHEN_RE.search(text)
    if not match:
        return text, ""
    return text[: match.start()].strip(), text[match.end() :].strip()
