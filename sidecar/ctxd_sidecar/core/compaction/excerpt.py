"""What a summariser is given: its system prompt, the answer schema, and the
transcript excerpt to fold.

Excerpt format. Optional previous-summary block, then one entry per folded
message, oldest first::

    [m7 user alice] text
    [m8 assistant] text → read_file#call_1({"path":"/src/app.py"})
    [m9 tool read_file#call_1] {"lines":120}
    [m10 tool fetch#call_2 error] timeout
    [m11 note] text

Clipping. Each message renders to at most about ``clip_chars`` characters
(default :data:`CLIP_CHARS` = 2000) of content: text, each tool call's
arguments and tool results share that budget. A clipped field keeps its
beginning (70 %) and end (30 %), never cutting through a word, and the
marker put in place of the middle lists the identifiers found there (URLs,
file paths, e-mail addresses, ids such as ``call_abc123`` or UUIDs,
numbers; verbatim, deduplicated, at most ``max(160, clip_chars / 5)``
characters, taken from the first and last 4 KiB of the clipped part)::

    …[5120 chars clipped; identifiers: https://x.test/a, /etc/app.toml, 8443]…

Pretty-printed JSON tool arguments and results are put on one line first.

Fitting a window (:func:`fit_lines`): when the rendered messages exceed a
token budget, the clip length is halved (down to :data:`MIN_CLIP_CHARS`)
and, if that is not enough, the oldest messages are left out and counted in
a ``(N earlier messages elided …)`` line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ctxd_sidecar.core.compaction.summary import Summary
from ctxd_sidecar.core.compaction.view import MessageView
from ctxd_sidecar.core.estimate import estimate_text

#: Default clip length of one message's content, in characters.
CLIP_CHARS = 2000
#: Fitting a window never clips messages shorter than this.
MIN_CLIP_CHARS = 200
#: Share of a clipped field kept from its beginning (the rest from its end).
HEAD_SHARE = 0.7
#: Identifiers are searched in at most this many characters at each end of a
#: clipped part (bounds the cost on huge tool results).
ID_SCAN_CHARS = 4 * 1024
#: Room for the identifiers of one clipped field: ``max(ID_MIN_CHARS, limit / 5)``.
ID_MIN_CHARS = 160
#: JSON longer than this is clipped as text instead of being re-serialised.
COMPACT_JSON_MAX_CHARS = 256 * 1024

#: What each list of the answer holds (the schema's descriptions).
_LISTS = {
    "goals": "what is being pursued",
    "decisions": "what was decided, and why",
    "open": "unresolved questions, pending work, promises made",
    "facts": "concrete facts, values, identifiers and results worth keeping",
}
ANSWER_SCHEMA: dict = {
    "type": "object",
    "properties": {
        **{
            name: {"type": "array", "items": {"type": "string"}, "description": text}
            for name, text in _LISTS.items()
        },
        "narrative": {
            "type": "string",
            "description": "free text, only for what does not fit the lists",
        },
    },
    "required": list(_LISTS),
    "additionalProperties": False,
}
ANSWER_SCHEMA_JSON = json.dumps(ANSWER_SCHEMA, separators=(",", ":"))

SYSTEM_PROMPT = f"""\
You compact an agent's conversation memory. You are given the summary of the \
conversation so far (if there is one) and an excerpt of older transcript \
messages that are about to be removed from the conversation. Write what the \
excerpt adds to the summary, so that the conversation can go on without it:

- goals: what the user and the agent are trying to achieve
- decisions: what was decided, and why
- open: unresolved questions, pending work, promises made
- facts: concrete facts, values, identifiers and results worth remembering

Rules:
- One short, specific line per entry. Never invent anything.
- Copy identifiers verbatim: ids, tool call ids, file paths, URLs, names, \
numbers, versions, error codes.
- Do not repeat entries the summary already has; add what is new or changed.
- Use narrative only for what does not fit the lists.

Transcript entries read `[<message id> <kind>] content`. Assistant tool calls \
read `tool_name#call_id(arguments)`; tool results read `[<id> tool \
tool_name#call_id] result` (`error` marks a failed call). \
`…[N chars clipped; identifiers: …]…` marks a shortened message; the \
identifiers it lists are real.

Reply with ONLY one JSON object matching this JSON schema, with no prose \
before or after it:
{ANSWER_SCHEMA_JSON}"""

PREVIOUS_SUMMARY_HEADER = (
    "Summary so far (already compacted; extend it, do not restate it and do not lose "
    "anything in it that is still true):"
)


def build_system_prompt(instructions: str = "", template: str = "") -> str:
    """The summariser's system prompt; ``instructions`` are appended as extra
    guidance (e.g. from a ``Compact`` call), ``template`` replaces the default."""
    prompt = template or SYSTEM_PROMPT
    if instructions.strip():
        prompt += "\n\nAdditional instructions for this compaction:\n" + instructions.strip()
    return prompt


# -- identifiers and clipping ----------------------------------------------------------

#: Characters that end a token (besides whitespace) when looking for identifiers.
_TOKEN_DELIMS = str.maketrans({c: " " for c in "\"'<>()[]{},;|`"})
_MARK = re.compile(r"[\d/@]")
_NUMBER = re.compile(r"[+-]?\d+(?:[.,:]\d+)*%?")
_ID_ORDER = ("url", "path", "email", "id", "number")


def _classify(token: str) -> str | None:
    if "://" in token:
        return "url"
    if "/" in token:
        if token[0] in "/~." or "." in token.rsplit("/", 1)[-1]:
            return "path"
        return "id" if any(c.isdigit() for c in token) else None
    if "@" in token:
        return "email" if "." in token.rsplit("@", 1)[-1] else None
    if _NUMBER.fullmatch(token):
        return "number" if len(token) >= 2 else None
    if len(token) >= 3 and any(c.isalpha() for c in token):
        return "id"
    return None


def identifiers(text: str, max_chars: int) -> list[str]:
    """Identifiers in ``text`` (by kind: URLs, paths, e-mails, ids, numbers),
    deduplicated, fitting ``max_chars`` when joined with ``", "``."""
    if len(text) > 2 * ID_SCAN_CHARS:
        text = text[:ID_SCAN_CHARS] + "\n" + text[-ID_SCAN_CHARS:]
    found: dict[str, list[str]] = {kind: [] for kind in _ID_ORDER}
    seen: set[str] = set()
    mark = _MARK.search
    # str.split is far faster than a regex scan over long tool output.
    for token in dict.fromkeys(text.translate(_TOKEN_DELIMS).split()):
        if not mark(token):
            continue
        token = token.rstrip(".,:;!?=*'").lstrip(":;=*'")
        if token and token not in seen:
            seen.add(token)
            kind = _classify(token)
            if kind:
                found[kind].append(token)
    out: list[str] = []
    used = 0
    for kind in _ID_ORDER:
        for value in found[kind]:
            cost = len(value) + 2
            if used + cost > max_chars:
                continue
            out.append(value)
            used += cost
    return out


def clip(text: str, limit: int) -> str:
    """``text`` shortened to about ``limit`` characters (see module docstring)."""
    if len(text) <= limit:
        return text
    head_end = _word_boundary_back(text, int(limit * HEAD_SHARE))
    tail_start = _word_boundary_forward(text, len(text) - (limit - int(limit * HEAD_SHARE)))
    tail_start = max(tail_start, head_end)
    dropped = text[head_end:tail_start]
    ids = identifiers(dropped, max(ID_MIN_CHARS, limit // 5))
    note = f"{len(dropped)} chars clipped"
    if ids:
        note += "; identifiers: " + ", ".join(ids)
    return f"{text[:head_end].rstrip()} …[{note}]… {text[tail_start:].lstrip()}"


def _word_boundary_back(text: str, i: int, reach: int = 48) -> int:
    if i <= 0 or text[i - 1].isspace() or text[i].isspace():
        return i
    for j in range(i, max(0, i - reach), -1):
        if text[j - 1].isspace():
            return j
    return i


def _word_boundary_forward(text: str, i: int, reach: int = 48) -> int:
    if i >= len(text) or text[i - 1].isspace() or text[i].isspace():
        return i
    for j in range(i, min(len(text), i + reach)):
        if text[j].isspace():
            return j
    return i


def compact_json(text: str) -> str:
    """Pretty-printed JSON re-serialised on one line without spaces; other
    text unchanged (single-line JSON saves too little to be worth parsing)."""
    stripped = text.strip()
    if stripped[:1] in ("{", "[") and "\n" in stripped and len(stripped) <= COMPACT_JSON_MAX_CHARS:
        try:
            return json.dumps(json.loads(stripped), ensure_ascii=False, separators=(",", ":"))
        except (ValueError, RecursionError):
            pass
    return text


# -- rendering -----------------------------------------------------------------------


def render_message(m: MessageView, clip_chars: int = CLIP_CHARS) -> str:
    """One excerpt entry for ``m`` (format in the module docstring)."""
    kind = m.kind
    if kind == "tool":
        tag = f"tool {m.name}#{m.call_id}" + (" error" if m.is_error else "")
        return f"[{m.id} {tag}] {clip(compact_json(m.content), clip_chars)}"
    if kind == "assistant" and m.tool_calls:
        text = m.text.strip()
        text_share = min(len(text), clip_chars // 2)
        per_call = max(MIN_CLIP_CHARS // 2, (clip_chars - text_share) // len(m.tool_calls))
        calls = ", ".join(
            f"{c.name}#{c.id}({clip(compact_json(c.arguments_json), per_call)})"
            for c in m.tool_calls
        )
        body = f"{clip(text, clip_chars // 2)} → {calls}" if text else f"→ {calls}"
        return f"[{m.id} assistant] {body}"
    tag = kind
    principal = getattr(m, "principal", "") if kind == "user" else ""
    if principal:
        tag += f" {principal}"
    return f"[{m.id} {tag}] {clip(m.text.strip(), clip_chars)}"


def line_tokens(line: str) -> int:
    """Estimated tokens one excerpt line costs (its newline included)."""
    return estimate_text(line) + 1


@dataclass(frozen=True, slots=True)
class FittedLines:
    lines: list[str]
    #: Oldest messages left out to fit (their lines are not in ``lines``).
    elided: int
    #: Clip length the lines were rendered with.
    clip_chars: int


def fit_lines(
    messages: Sequence[MessageView],
    clip_chars: int = CLIP_CHARS,
    budget_tokens: int | None = None,
) -> FittedLines:
    """Render ``messages`` to excerpt lines within ``budget_tokens`` (module
    docstring: halve the clip length, then elide the oldest).

    The clip length and the elided count are first chosen from size
    estimates, so that only messages likely to be in the excerpt are
    rendered; the rendered lines then settle it exactly.
    """
    if budget_tokens is None:
        return FittedLines([render_message(m, clip_chars) for m in messages], 0, clip_chars)
    n = len(messages)
    sizes = [_sizes(m) for m in messages]

    def estimates(clip_at: int) -> list[int]:
        return [_estimated_tokens(h, c, f, clip_at) for h, c, f in sizes]

    costs = estimates(clip_chars)
    while sum(costs) > budget_tokens and clip_chars > MIN_CLIP_CHARS:
        clip_chars = max(MIN_CLIP_CHARS, clip_chars // 2)
        costs = estimates(clip_chars)
    note = line_tokens(_elided_line(n))
    start, total = 0, sum(costs)
    while start < n and total + (note if start else 0) > budget_tokens:
        total -= costs[start]
        start += 1

    def render(first: int) -> tuple[list[str], list[int]]:
        lines = [render_message(m, clip_chars) for m in messages[first:]]
        return lines, [line_tokens(line) for line in lines]

    lines, actual = render(start)
    total = sum(actual)
    # Identifier lists make clipped lines longer than estimated: clip harder.
    while total + (note if start else 0) > budget_tokens and clip_chars > MIN_CLIP_CHARS:
        clip_chars = max(MIN_CLIP_CHARS, clip_chars // 2)
        lines, actual = render(start)
        total = sum(actual)
    dropped = 0
    while dropped < len(lines) and total + (note if start + dropped else 0) > budget_tokens:
        total -= actual[dropped]
        dropped += 1
    lines, start = lines[dropped:], start + dropped
    # The estimates may have been generous: take older messages back while they fit.
    older: list[str] = []
    while start > 0:
        line = render_message(messages[start - 1], clip_chars)
        cost = line_tokens(line)
        if total + cost + (note if start > 1 else 0) > budget_tokens:
            break
        older.append(line)
        total += cost
        start -= 1
    older.reverse()
    return FittedLines(older + lines, start, clip_chars)


def _sizes(m: MessageView) -> tuple[int, int, int]:
    """(header chars, content chars, clipped fields) of ``m``'s excerpt line."""
    if m.kind == "tool":
        return len(m.id) + len(m.name) + len(m.call_id) + 20, len(m.content), 1
    calls = m.tool_calls
    header = len(m.id) + len(getattr(m, "principal", "") or "") + 16
    content = len(m.text) + sum(len(c.name) + len(c.id) + len(c.arguments_json) + 6 for c in calls)
    return header, content, 1 + len(calls)


def _estimated_tokens(header: int, content: int, fields: int, clip_at: int) -> int:
    if content > clip_at:  # clipped: the clip length plus a marker per field
        content = min(content, clip_at + fields * 48)
    return (header + content + 3) // 4 + 1


def _elided_line(count: int) -> str:
    return f"({count} earlier messages elided to fit the summariser's window)"


def assemble_excerpt(
    lines: Sequence[str],
    previous: Summary | None = None,
    *,
    elided: int = 0,
) -> str:
    """The excerpt text: previous summary block, then the transcript lines."""
    parts: list[str] = []
    rendered = previous.render() if previous is not None else ""
    if rendered:
        parts += [PREVIOUS_SUMMARY_HEADER, rendered, ""]
    count = len(lines) + elided
    parts.append(f"Transcript excerpt to compact ({count} messages, oldest first):")
    if elided:
        parts.append(_elided_line(elided))
    parts.extend(lines)
    return "\n".join(parts)


def build_excerpt(
    folded: Sequence[MessageView],
    previous: Summary | None = None,
    *,
    clip_chars: int = CLIP_CHARS,
    max_tokens: int | None = None,
) -> str:
    """The excerpt for ``folded`` in one piece (``PlanCompaction``).

    With ``max_tokens`` the whole excerpt, previous summary included, is
    fitted to that many estimated tokens (see :func:`fit_lines`).
    """
    budget = None
    if max_tokens is not None:
        overhead = estimate_text(assemble_excerpt([], previous))
        budget = max(0, max_tokens - overhead)
    fitted = fit_lines(folded, clip_chars, budget)
    return assemble_excerpt(fitted.lines, previous, elided=fitted.elided)
