"""Running a summariser plugin over the messages a cut folds.

A summariser (supplied through the ``ctxd_summarisers`` hook) is any object
with

* ``name`` — how ``Compact`` and the configuration refer to it;
* ``window_tokens`` — its model's context window in tokens, or ``None`` when
  it has no window (the request is then sent in one piece);
* ``max_output_tokens`` — the answer allowance reserved in that window;
* ``async summarise(request: SummaryRequest) -> Summary | str`` — a
  :class:`Summary`, or answer text that :func:`parse_answer` reads;
* optionally ``uses_excerpt = False`` when it works on ``request.messages``
  alone (then no excerpt is rendered), and ``async aclose()``.

It raises :class:`ctxd_sidecar.core.errors.Unavailable` for transient trouble
(timeouts, connection, rate limits, 5xx) and :class:`SummariserError` for
answers or refusals that retrying will not fix soon. Any other exception is
reported as a ``SummariserError`` (reason ``failed``).

Fitting the window: the request (system prompt + excerpt + answer
allowance) must fit ``window_tokens`` × :data:`WINDOW_SAFETY`. The folded
messages are fitted to at most ``max_passes`` windows' worth (clip shorter,
then elide the oldest; see :mod:`.excerpt`) and sent in consecutive
passes, each showing the summary so far (previous summary merged with the
earlier passes' answers) so that later passes extend it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol, runtime_checkable

from ctxd_sidecar.core import errors
from ctxd_sidecar.core.compaction.errors import MalformedAnswer, SummariserError
from ctxd_sidecar.core.compaction.excerpt import (
    ANSWER_SCHEMA,
    CLIP_CHARS,
    ID_MIN_CHARS,
    assemble_excerpt,
    build_system_prompt,
    fit_lines,
    line_tokens,
)
from ctxd_sidecar.core.compaction.summary import (
    DEFAULT_CAP,
    NARRATIVE_MAX_CHARS,
    Summary,
    merge,
    parse_answer,
)
from ctxd_sidecar.core.compaction.view import MessageView
from ctxd_sidecar.core.estimate import estimate_text

log = logging.getLogger(__name__)

#: Share of the summariser's window a request may fill: chars/4 is only an
#: estimate and tokenizers differ.
WINDOW_SAFETY = 0.9
#: Smallest excerpt budget per pass worth a model call.
MIN_PASS_TOKENS = 256
DEFAULT_MAX_PASSES = 8
#: Tokens for the chat framing of the two request messages.
_FRAMING_TOKENS = 16


@dataclass(frozen=True)
class SummaryRequest:
    #: The summariser system prompt (instructions and answer schema).
    system_prompt: str
    #: The user message: summary so far + transcript lines of this pass
    #: (empty for summarisers with ``uses_excerpt = False``).
    excerpt: str
    answer_schema: dict
    #: The folded messages this pass covers.
    messages: Sequence[MessageView]
    #: The summary so far, as shown in the excerpt (None when there is none).
    previous: Summary | None
    instructions: str = ""
    #: 1-based number of this pass.
    pass_number: int = 1


@runtime_checkable
class Summariser(Protocol):
    name: str
    window_tokens: int | None
    max_output_tokens: int

    async def summarise(self, request: SummaryRequest) -> Summary | str: ...


@dataclass(frozen=True)
class SummariseResult:
    #: What the folded messages add: merge it into the stored summary with
    #: :func:`merge`. ``covers_messages`` is the number of folded messages.
    summary: Summary
    passes: int
    summariser: str
    #: Folded messages left out of every excerpt to fit the window.
    elided: int = 0


async def summarise(
    summariser: Summariser,
    folded: Sequence[MessageView],
    previous: Summary | None = None,
    *,
    instructions: str = "",
    prompt_template: str = "",
    clip_chars: int = CLIP_CHARS,
    max_passes: int = DEFAULT_MAX_PASSES,
    cap: int = DEFAULT_CAP,
    narrative_max_chars: int = NARRATIVE_MAX_CHARS,
) -> SummariseResult:
    """Summarise ``folded`` with ``summariser``, in as many passes as its
    window needs (at most ``max_passes``).

    :raise errors.Unavailable: the summariser is unreachable or too slow.
    :raise SummariserError: malformed answer, refusal, window too small.
    """
    if not folded:
        raise ValueError("nothing to summarise")
    if max_passes < 1:
        raise ValueError("max_passes must be at least 1")
    previous = previous if previous is not None and not previous.is_empty() else None
    system_prompt = build_system_prompt(instructions, prompt_template)
    name = summariser.name
    window = getattr(summariser, "window_tokens", None)
    uses_excerpt = getattr(summariser, "uses_excerpt", True)

    def request(lines, messages, running, elided, number) -> SummaryRequest:
        excerpt = assemble_excerpt(lines, running, elided=elided) if uses_excerpt else ""
        return SummaryRequest(
            system_prompt=system_prompt,
            excerpt=excerpt,
            answer_schema=ANSWER_SCHEMA,
            messages=messages,
            previous=running,
            instructions=instructions,
            pass_number=number,
        )

    def finish(acc: Summary, passes: int, elided: int) -> SummariseResult:
        return SummariseResult(replace(acc, covers_messages=len(folded)), passes, name, elided)

    if window is None or not uses_excerpt:
        lines = fit_lines(folded, clip_chars).lines if uses_excerpt else []
        answer = await _call(summariser, request(lines, folded, previous, 0, 1))
        return finish(merge(None, answer, cap=cap, narrative_max_chars=narrative_max_chars), 1, 0)

    usable = (
        int(window * WINDOW_SAFETY)
        - summariser.max_output_tokens
        - estimate_text(system_prompt)
        - _FRAMING_TOKENS
    )

    def budget_for(running: Summary | None, elided: int) -> int:
        budget = usable - estimate_text(assemble_excerpt([], running, elided=elided))
        if budget < MIN_PASS_TOKENS:
            raise SummariserError(
                "window_too_small",
                f"summariser {name!r}: its window of {window} tokens leaves {max(budget, 0)} "
                f"for the excerpt after the prompt, the summary so far and "
                f"{summariser.max_output_tokens} answer tokens; {MIN_PASS_TOKENS} are needed "
                "(raise its window or lower its max_output_tokens)",
            )
        return budget

    # Room over all passes, estimated: each answer grows the summary shown to
    # the next pass (allow a share of the budget per pass), and packing whole
    # lines leaves up to one line's worth unused per pass. Should the
    # estimate fall short, the last pass fits what remains (clip, elide).
    first = budget_for(previous, 0)
    slack = min(first // 4, (clip_chars + ID_MIN_CHARS + 120) // 4)
    growth = min(summariser.max_output_tokens, first // (2 * max_passes))
    capacity = sum(max(0, first - k * growth - slack) for k in range(max_passes))
    fitted = fit_lines(folded, clip_chars, capacity)
    lines, messages = fitted.lines, list(folded[fitted.elided :])
    costs = [line_tokens(line) for line in lines]
    elided_total = fitted.elided
    acc = Summary()
    running = previous
    i = passes = 0
    while i < len(lines):
        passes += 1
        note = fitted.elided if passes == 1 else 0
        budget = budget_for(running, note)
        if passes == max_passes:  # what remains must fit this pass
            rest = fit_lines(messages[i:], fitted.clip_chars, budget)
            chunk, chunk_msgs = rest.lines, messages[i + rest.elided :]
            note += rest.elided
            elided_total += rest.elided
            j = len(lines)
        else:
            j, used = i, 0
            while j < len(lines) and used + costs[j] <= budget:
                used += costs[j]
                j += 1
            if j == i:  # one message larger than a whole pass: clip it harder
                one = fit_lines(messages[i : i + 1], fitted.clip_chars, budget)
                chunk, chunk_msgs = one.lines, messages[i : i + 1 - one.elided]
                elided_total += one.elided
                j = i + 1
            else:
                chunk, chunk_msgs = lines[i:j], messages[i:j]
        i = j
        if not chunk:
            passes -= 1
            continue
        answer = await _call(summariser, request(chunk, chunk_msgs, running, note, passes))
        acc = merge(acc, answer, cap=cap, narrative_max_chars=narrative_max_chars)
        running = merge(previous, acc, cap=cap, narrative_max_chars=narrative_max_chars)
    if passes == 0:
        raise SummariserError(
            "window_too_small",
            f"summariser {name!r}: no folded message fits its window of {window} tokens",
        )
    if elided_total:
        log.info(
            "compaction excerpt trimmed",
            extra={"summariser": name, "elided": elided_total, "passes": passes},
        )
    return finish(acc, passes, elided_total)


async def _call(summariser: Summariser, request: SummaryRequest) -> Summary:
    name = summariser.name
    try:
        answer = await summariser.summarise(request)
    except errors.CtxdError:
        raise
    except Exception as exc:
        log.exception("summariser failed", extra={"summariser": name})
        raise SummariserError(
            "failed", f"summariser {name!r} failed ({type(exc).__name__}); see the sidecar log"
        ) from exc
    if isinstance(answer, Summary):
        return answer
    if not isinstance(answer, str):
        raise MalformedAnswer(
            f"summariser {name!r} returned a {type(answer).__name__}, not a summary or text"
        )
    try:
        return parse_answer(answer)
    except MalformedAnswer as exc:
        raise MalformedAnswer(f"summariser {name!r}: {exc.message}") from None
