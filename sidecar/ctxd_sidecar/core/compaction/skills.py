"""Which loaded skills a compaction evicts.

After a fold, a loaded skill whose name is no longer referenced as
``@skill:<name>`` anywhere in the kept window (message texts, tool-call
arguments, tool results) nor in the texts that stay in the prompt (the plan,
standing instructions) has its body evicted; its name stays on the record.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from ctxd_sidecar.core.compaction.view import MessageView

#: ``@skill:<name>``; a name is letters, digits, ``.``, ``_``, ``-`` (a
#: trailing ``.`` is sentence punctuation, not part of the name).
SKILL_REF = re.compile(r"@skill:([A-Za-z0-9][A-Za-z0-9._-]*)")


def skill_references(text: str) -> set[str]:
    """The skill names ``text`` references."""
    return {m.group(1).rstrip(".") for m in SKILL_REF.finditer(text)}


def message_texts(m: MessageView) -> Iterable[str]:
    if m.kind == "tool":
        yield m.content
        return
    yield m.text
    for call in m.tool_calls:
        yield call.arguments_json


def skills_to_evict(
    loaded: Iterable[str],
    kept: Sequence[MessageView],
    *,
    also_referenced_in: Iterable[str] = (),
) -> list[str]:
    """Names in ``loaded`` (order kept) referenced neither in ``kept`` nor in
    ``also_referenced_in`` (e.g. the rendered plan)."""
    loaded = list(loaded)
    if not loaded:
        return []
    referenced: set[str] = set()
    for text in also_referenced_in:
        if "@skill:" in text:
            referenced |= skill_references(text)
    for m in kept:
        for text in message_texts(m):
            if "@skill:" in text:
                referenced |= skill_references(text)
    return [name for name in loaded if name not in referenced]
