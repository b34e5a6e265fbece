"""Where to cut a transcript: which prefix is folded into the summary.

A cut at index ``f`` folds ``messages[:f]`` and keeps ``messages[f:]``
verbatim. A cut is *valid* when

1. it folds something and keeps something (``0 < f < n``);
2. the first kept message is a ``user`` message: system and note messages
   just before it are folded like any other (their text reaches the
   summary), so the kept window always opens with a user turn;
3. it does not separate an assistant turn from its tool results: no kept
   ``tool`` message answers a call made by a folded assistant message.
   Results are matched to calls by ``call_id``; when ids are reused, a result
   answers the latest earlier call with that id. A result whose call is
   nowhere in the transcript does not constrain the cut.

Which valid cut is chosen:

* without ``target_tokens``: the latest valid cut that keeps *at least* the
  last ``keep_last`` messages (``f <= n - keep_last``). The kept window may
  be longer than ``keep_last`` (a tool round or the messages after the
  nearest earlier user message stay whole), never shorter.
* with ``target_tokens``: when the tail ``keep_last`` leaves (everything,
  if ``keep_last >= n``) fits the target, exactly as without it. Otherwise
  fold further until the kept tail fits, but keep at least 2 messages (or
  ``keep_last``, if smaller), and take the earliest valid cut from there on
  (the longest tail that fits). If no valid cut fits, take the latest valid
  cut before that point (it folds as much as the rules allow;
  ``target_met`` is then ``False``).
* when no valid cut exists the result is a :class:`Decline` with a reason a
  person can act on.

Cost is O(n) in the number of messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sidecar.core import errors
from sidecar.core.compaction.view import MessageView

#: Messages kept verbatim unless the caller says otherwise (SPEC §3).
DEFAULT_KEEP_LAST = 12
#: ``target_tokens`` never folds the tail below this many messages.
MIN_KEPT_WITH_TARGET = 2


@dataclass(frozen=True, slots=True)
class Cut:
    """Fold ``messages[:fold]`` and keep ``messages[fold:]``."""

    fold: int
    kept: int
    #: Id of the last folded message (the fold point a plan records).
    fold_through_id: str
    folded_tokens: int
    kept_tokens: int
    #: ``None`` without a target; otherwise whether the kept tail fits it.
    target_met: bool | None = None


@dataclass(frozen=True, slots=True)
class Decline:
    """No compaction: ``reason`` says why, in words fit for a caller."""

    reason: str


def plan_cut(
    messages: Sequence[MessageView],
    keep_last: int = DEFAULT_KEEP_LAST,
    target_tokens: int | None = None,
) -> Cut | Decline:
    """Choose the fold point for ``messages`` (see the module docstring).

    :raise errors.InvalidArgument: ``keep_last < 1`` or ``target_tokens < 1``.
    """
    if keep_last < 1:
        raise errors.InvalidArgument("keep_last", f"must be at least 1, got {keep_last}")
    if target_tokens is not None and target_tokens < 1:
        raise errors.InvalidArgument(
            "target_tokens", f"must be positive when set, got {target_tokens}"
        )
    n = len(messages)
    if n == 0:
        return Decline("nothing to fold: the transcript is empty")

    # suffix[i] = tokens of messages[i:]
    suffix = [0] * (n + 1)
    for i in range(n - 1, -1, -1):
        suffix[i] = suffix[i + 1] + messages[i].tokens
    valid = _valid_cuts(messages)

    base = max(0, n - keep_last)
    if target_tokens is None or suffix[base] <= target_tokens:
        if base == 0:
            if target_tokens is None:
                return Decline(
                    f"nothing to fold: the transcript has {n} messages and "
                    f"keep_last={keep_last} keeps them all"
                )
            return Decline(
                f"nothing to fold: all {n} messages ({suffix[0]} tokens) fit "
                f"target_tokens={target_tokens} and keep_last={keep_last} keeps them all"
            )
        fold = _latest_valid(valid, base)
        if fold is None:
            return Decline(_no_cut_reason(messages, base, keep_last))
        return _cut(messages, fold, suffix, target_tokens)

    # The tail keep_last leaves is over the target: fold further until it
    # fits, keeping at least MIN_KEPT_WITH_TARGET (or keep_last, if smaller).
    last_allowed = max(base, n - MIN_KEPT_WITH_TARGET)
    fitting = base
    while suffix[fitting] > target_tokens and fitting < last_allowed:
        fitting += 1
    fold = None
    if suffix[fitting] <= target_tokens:
        fold = _earliest_valid(valid, max(fitting, 1), last_allowed)
    if fold is None:
        fold = _latest_valid(valid, fitting)
    if fold is None:
        return Decline(_no_cut_reason(messages, last_allowed, keep_last))
    return _cut(messages, fold, suffix, target_tokens)


def _cut(messages, fold: int, suffix: list[int], target: int | None) -> Cut:
    kept_tokens = suffix[fold]
    return Cut(
        fold=fold,
        kept=len(messages) - fold,
        fold_through_id=messages[fold - 1].id,
        folded_tokens=suffix[0] - kept_tokens,
        kept_tokens=kept_tokens,
        target_met=None if target is None else kept_tokens <= target,
    )


def _valid_cuts(messages: Sequence[MessageView]) -> list[bool]:
    """valid[f] for f in 0..n: True when a cut at f obeys rules 1-3."""
    n = len(messages)
    # A tool result at j answering a call made at a < j forbids cuts in (a, j].
    spans = [0] * (n + 2)
    caller: dict[str, int] = {}
    for j, m in enumerate(messages):
        if m.kind == "assistant":
            for call in m.tool_calls:
                caller[call.id] = j
        elif m.kind == "tool":
            a = caller.get(m.call_id)
            if a is not None:
                spans[a + 1] += 1
                spans[j + 1] -= 1
    valid = [False] * (n + 1)
    open_rounds = 0
    for f in range(n):
        open_rounds += spans[f]
        valid[f] = f > 0 and open_rounds == 0 and messages[f].kind == "user"
    return valid


def _latest_valid(valid: list[bool], at_most: int) -> int | None:
    for f in range(at_most, 0, -1):
        if valid[f]:
            return f
    return None


def _earliest_valid(valid: list[bool], at_least: int, at_most: int) -> int | None:
    for f in range(at_least, at_most + 1):
        if valid[f]:
            return f
    return None


def _no_cut_reason(messages: Sequence[MessageView], limit: int, keep_last: int) -> str:
    """Why no index in 1..limit is a valid cut."""
    head = "no valid cut: the kept window must start with a user message"
    if not any(m.kind == "user" for m in messages[1 : limit + 1]):
        if any(m.kind == "user" for m in messages[limit + 1 :]):
            tail = len(messages) - limit
            advice = "lower keep_last" if tail == keep_last else "at least 2 messages stay"
            return (
                f"{head}, and the only later user messages are among the last {tail} "
                f"messages, which stay ({advice})"
            )
        return (
            f"{head}, and there is none after the first message (one long agent turn); "
            "compact after the next user message"
        )
    return (
        f"{head} that does not split an assistant turn from its tool results, and every "
        "candidate sits inside such a round; compact once the tool round has completed"
    )
