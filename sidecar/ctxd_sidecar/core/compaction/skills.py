"""Which loaded skills a compaction evicts.

After a fold, a loaded skill whose name is no longer referenced as
``@skill:<name>`` anywhere in the kept window (message texts, tool-call
arguments, tool results) nor in the texts that stay in the prompt (the plan,
standing instructions) has its body evicted; its name stays on the record.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ctxd_sidecar.core.compaction.view import MessageView
from ctxd_sidecar.core.skills.frontmatter import find_references


def skill_references(text: str) -> set[str]:
    """The skill names ``text`` references (the one ``@skill:`` grammar,
    :func:`ctxd_sidecar.core.skills.frontmatter.find_references`)."""
    return set(find_references(text))


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
