"""ctxd's token estimate, the one used everywhere.

Provider-independent and cheap: ``ceil(chars / 4)`` per text (Unicode code
points) plus :data:`MESSAGE_OVERHEAD` per message; JSON (tool arguments,
structured tool results) is counted by its text. Contexts keep the running
sum (:mod:`ctxd_sidecar.core.contexts.tokens` calibrates it against what a
provider reports); compaction uses the same numbers to fit excerpts.
"""

from __future__ import annotations

from typing import Any

#: Estimated tokens each message costs on top of its text (role, framing).
MESSAGE_OVERHEAD = 4


def estimate_text(text: str) -> int:
    """``ceil(chars / 4)``: ``""`` → 0, ``"abcd"`` → 1, ``"abcde"`` → 2."""
    return -(-len(text) // 4)


def estimate_plain(kind: str, text_chars: int, content_chars: int) -> int:
    """:func:`estimate_message` of a message without tool calls, from the
    lengths alone (a restore knows them before it has the texts)."""
    return -(-(content_chars if kind == "tool" else text_chars) // 4) + MESSAGE_OVERHEAD


def estimate_message(m: Any) -> int:
    """One message (any object with ``kind``, ``text``, ``tool_calls``,
    ``content``): tool calls count name and arguments, a tool result its
    content, plus the overhead."""
    if m.kind == "tool":
        body = estimate_text(m.content)
    else:
        body = estimate_text(m.text)
        for c in m.tool_calls:
            body += estimate_text(c.name) + estimate_text(c.arguments_json)
    return body + MESSAGE_OVERHEAD
