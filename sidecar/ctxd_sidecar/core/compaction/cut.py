"""Where to cut a transcript: which prefix is folded into the summary.

A cut at index ``f`` folds ``messages[:f]`` and keeps ``messages[f:]``
verbatim. A cut is *valid* when

1. it folds something and keeps something (``0 < f < n``);
2. the kept window opens at a boundary a provider accepts:

   * a **user boundary**: the first kept message is a ``user`` message
     (system and note messages just before it are folded like any other, so
     their text reaches the summary); or
   * a **round boundary** (with ``round_cuts=True``), for long agentic runs
     with no user message to cut at: the first kept message is an
     ``assistant`` message with tool calls whose results all follow it
     (every call is answered in the kept part);
3. it does not separate an assistant turn from its tool results: no kept
   ``tool`` message answers a call made by a folded assistant message;
4. **open calls pin the cut**: no folded assistant message has a tool call
   that no later tool result answers. A long-running call (``job-1``) stays
   in the kept window with everything after it until its result arrives, so
   the result always finds its call. With ``abandon_after=N``, a call
   followed by at least ``N`` user messages without a result counts as
   *abandoned* and no longer pins (the service records that in a note; see
   :func:`open_calls`, :func:`abandoned_calls`);
5. it does not separate a Responses ``reasoning`` item from the item after
   it (:func:`~.view.binds_next`): the API refuses a ``function_call``
   without the reasoning item of its response, so both are folded or both
   kept. A round boundary then opens the kept window with the reasoning
   item(s) just before the complete round.

Results are matched to calls by ``call_id``; when ids are reused, a result
answers the latest earlier call with that id (an earlier call whose id is
reused before any result stays unanswered). A result whose call is nowhere
in the transcript does not constrain the cut.

Which valid cut is chosen: user boundaries are preferred; a round boundary
is taken only when no user boundary is available in the range considered.

* without ``target_tokens``: the latest valid cut that keeps *at least* the
  last ``keep_last`` messages (``f <= n - keep_last``). The kept window may
  be longer than ``keep_last`` (a tool round or the messages after the
  nearest earlier user message stay whole), never shorter.
* with ``target_tokens``: when the tail ``keep_last`` leaves (everything,
  if ``keep_last >= n``) fits the target, exactly as without it. Otherwise
  fold further until the kept tail fits, but keep at least 2 messages (or
  ``keep_last``, if smaller), and take the earliest valid cut from there on
  (the longest tail that fits; a user boundary first, else a round
  boundary). If none fits, take the latest valid cut before that point as
  without a target (``target_met`` is then ``False``).
* when no valid cut exists the result is a :class:`Decline` with a reason a
  person can act on.

A round-boundary cut sets ``Cut.opens_with_user = False``: the Anthropic
messages shape must open with a user message, so the summary block is then
rendered as a user-role preamble before the kept window
(:func:`summary_placement`).

Cost is O(n) in the number of messages (plus their tool calls).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ctxd_sidecar.core import errors
from ctxd_sidecar.core.compaction.view import MessageView, binds_next

#: Messages kept verbatim unless the caller says otherwise (``contexts.keep_last``).
DEFAULT_KEEP_LAST = 12
#: ``target_tokens`` never folds the tail below this many messages.
MIN_KEPT_WITH_TARGET = 2
#: A suggested ``abandon_after`` (config ``compaction.open_call_max_turns``).
DEFAULT_OPEN_CALL_MAX_TURNS = 8

Placement = Literal["system", "user_preamble"]
#: Provider shapes :func:`summary_placement` knows.
PROVIDERS = ("ctxd", "openai", "anthropic")
#: First line of the summary when it is sent as a user-role preamble, so the
#: model does not read it as a new request.
USER_PREAMBLE_HEAD = "[Context carried over from earlier in this conversation; not a new request.]"


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
    #: ``False`` for a round-boundary cut: the kept window opens with an
    #: assistant message, so Anthropic needs the summary as a user preamble.
    opens_with_user: bool = True


@dataclass(frozen=True, slots=True)
class Decline:
    """No compaction: ``reason`` says why, in words fit for a caller."""

    reason: str


@dataclass(frozen=True, slots=True)
class _Rounds:
    """What one pass over the transcript learns about its tool calls."""

    #: answered[j]: every tool call of message j has a later result.
    complete: list[bool]
    #: open_rounds[f] > 0: a cut at f separates a call from its result.
    split: list[bool]
    #: (index, call_id) of calls without a result, in transcript order.
    open: list[tuple[int, str]]
    #: users_after[i]: user messages after index i.
    users_after: list[int]


def _rounds(messages: Sequence[MessageView]) -> _Rounds:
    n = len(messages)
    spans = [0] * (n + 2)
    caller: dict[str, int] = {}
    unanswered: dict[tuple[int, str], None] = {}  # ordered set
    for j, m in enumerate(messages):
        if m.kind == "assistant":
            for call in m.tool_calls:
                caller[call.id] = j
                unanswered[(j, call.id)] = None
        elif m.kind == "tool":
            a = caller.get(m.call_id)
            if a is not None:
                spans[a + 1] += 1
                spans[j + 1] -= 1
                unanswered.pop((a, m.call_id), None)
    split = [False] * (n + 1)
    depth = 0
    for f in range(n + 1):
        depth += spans[f]
        split[f] = depth > 0
    open_idx = {a for a, _ in unanswered}
    complete = [
        bool(m.kind == "assistant" and m.tool_calls) and j not in open_idx
        for j, m in enumerate(messages)
    ]
    users_after = [0] * (n + 1)
    for i in range(n - 1, -1, -1):
        users_after[i] = users_after[i + 1] + (
            1 if i + 1 < n and messages[i + 1].kind == "user" else 0
        )
    return _Rounds(complete, split, list(unanswered), users_after[:n])


def open_calls(messages: Sequence[MessageView]) -> list[tuple[int, str]]:
    """``(index, call_id)`` of every tool call no later result answers, in order."""
    return _rounds(messages).open


def abandoned_calls(messages: Sequence[MessageView], abandon_after: int) -> list[tuple[int, str]]:
    """The open calls followed by at least ``abandon_after`` user messages.

    These no longer pin the cut under ``plan_cut(..., abandon_after=...)``;
    the service records an "abandoned" note for each before folding them.
    """
    _check_abandon(abandon_after)
    r = _rounds(messages)
    return [(a, cid) for a, cid in r.open if r.users_after[a] >= abandon_after]


def _check_abandon(abandon_after: int | None) -> None:
    if abandon_after is not None and abandon_after < 1:
        raise errors.InvalidArgument(
            "abandon_after", f"must be at least 1 when set, got {abandon_after}"
        )


def plan_cut(
    messages: Sequence[MessageView],
    keep_last: int = DEFAULT_KEEP_LAST,
    target_tokens: int | None = None,
    abandon_after: int | None = None,
    round_cuts: bool = False,
) -> Cut | Decline:
    """Choose the fold point for ``messages`` (see the module docstring).

    ``round_cuts`` enables round boundaries (rule 2); it is off by default so
    a caller opts in once its renderer honours :attr:`Cut.opens_with_user`
    (an Anthropic slice opening with an assistant message is invalid).

    :raise errors.InvalidArgument: ``keep_last < 1``, ``target_tokens < 1``
        or ``abandon_after < 1``.
    """
    if keep_last < 1:
        raise errors.InvalidArgument("keep_last", f"must be at least 1, got {keep_last}")
    if target_tokens is not None and target_tokens < 1:
        raise errors.InvalidArgument(
            "target_tokens", f"must be positive when set, got {target_tokens}"
        )
    _check_abandon(abandon_after)
    n = len(messages)
    if n == 0:
        return Decline("nothing to fold: the transcript is empty")

    # suffix[i] = tokens of messages[i:]
    suffix = [0] * (n + 1)
    for i in range(n - 1, -1, -1):
        suffix[i] = suffix[i + 1] + messages[i].tokens
    rounds = _rounds(messages)
    pin = _pin(rounds, abandon_after, n)
    user, round_ = _valid_cuts(messages, rounds, pin, round_cuts)

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
        fold = _latest(user, base) or _latest(round_, base)
        if fold is None:
            return Decline(_no_cut_reason(messages, rounds, pin, base, keep_last, round_cuts))
        return _cut(messages, fold, suffix, target_tokens)

    # The tail keep_last leaves is over the target: fold further until it
    # fits, keeping at least MIN_KEPT_WITH_TARGET (or keep_last, if smaller).
    last_allowed = max(base, n - MIN_KEPT_WITH_TARGET)
    fitting = base
    while suffix[fitting] > target_tokens and fitting < last_allowed:
        fitting += 1
    fold = None
    if suffix[fitting] <= target_tokens:
        lo = max(fitting, 1)
        fold = _earliest(user, lo, last_allowed) or _earliest(round_, lo, last_allowed)
    if fold is None:
        fold = _latest(user, fitting) or _latest(round_, fitting)
    if fold is None:
        return Decline(_no_cut_reason(messages, rounds, pin, last_allowed, keep_last, round_cuts))
    return _cut(messages, fold, suffix, target_tokens)


def _pin(rounds: _Rounds, abandon_after: int | None, n: int) -> int:
    """The latest fold allowed by rule 4: at most the earliest pinning call."""
    for a, _ in rounds.open:
        if abandon_after is None or rounds.users_after[a] < abandon_after:
            return a
    return n


def _cut(messages, fold: int, suffix: list[int], target: int | None) -> Cut:
    kept_tokens = suffix[fold]
    return Cut(
        fold=fold,
        kept=len(messages) - fold,
        fold_through_id=messages[fold - 1].id,
        folded_tokens=suffix[0] - kept_tokens,
        kept_tokens=kept_tokens,
        target_met=None if target is None else kept_tokens <= target,
        opens_with_user=messages[fold].kind == "user",
    )


def _valid_cuts(
    messages: Sequence[MessageView], rounds: _Rounds, pin: int, round_cuts: bool
) -> tuple[list[bool], list[bool]]:
    """(user[f], round[f]) for f in 0..n: True when a cut at f obeys rules 1-5."""
    n = len(messages)
    user = [False] * (n + 1)
    round_ = [False] * (n + 1)
    bound = [binds_next(m) for m in messages]
    for f in range(1, min(n - 1, pin) + 1):
        if rounds.split[f] or bound[f - 1]:
            continue
        if messages[f].kind == "user":
            user[f] = True
        elif round_cuts:
            g = f
            while g < n - 1 and bound[g]:  # reasoning items open the round
                g += 1
            round_[f] = rounds.complete[g]
    return user, round_


def _latest(valid: list[bool], at_most: int) -> int | None:
    for f in range(min(at_most, len(valid) - 1), 0, -1):
        if valid[f]:
            return f
    return None


def _earliest(valid: list[bool], at_least: int, at_most: int) -> int | None:
    for f in range(at_least, min(at_most, len(valid) - 1) + 1):
        if valid[f]:
            return f
    return None


def _no_cut_reason(
    messages: Sequence[MessageView],
    rounds: _Rounds,
    pin: int,
    limit: int,
    keep_last: int,
    round_cuts: bool,
) -> str:
    """Why no index in 1..limit is a valid cut."""
    if pin < limit:
        cid = next(c for a, c in rounds.open if a == pin)
        call = next((c for c in messages[pin].tool_calls if c.id == cid), None)
        label = f"{call.name}#{cid}" if call is not None else cid
        return (
            f"no valid cut: the tool call {label} (message {messages[pin].id}) has no result "
            "yet, and an open call pins the cut before it; compact once its result has "
            "arrived (or once it counts as abandoned)"
        )

    def opens(m: MessageView) -> bool:
        return m.kind == "user" or (round_cuts and m.kind == "assistant" and bool(m.tool_calls))

    what = "a user message or a complete tool round" if round_cuts else "a user message"
    head = f"no valid cut: the kept window must start with {what}"
    if not any(opens(m) for m in messages[1 : limit + 1]):
        if any(opens(m) for m in messages[limit + 1 :]):
            tail = len(messages) - limit
            advice = "lower keep_last" if tail == keep_last else "at least 2 messages stay"
            return (
                f"{head}, and the only later ones are among the last {tail} "
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


# -- rendering the summary next to a kept window ---------------------------------------


def summary_placement(kept: Sequence[MessageView], provider: str = "anthropic") -> Placement:
    """Where the summary block goes in ``provider``'s shape of the slice.

    ``"system"``: with the system blocks (ctxd's own shape and OpenAI chat
    completions always; Anthropic when the kept window opens with a user
    message). ``"user_preamble"``: as a user-role message before the kept
    window — Anthropic's messages must open with a user message, and a
    round-boundary cut opens with an assistant message.
    """
    if provider not in PROVIDERS:
        raise ValueError(f"unknown provider shape {provider!r} (known: {', '.join(PROVIDERS)})")
    if provider != "anthropic":
        return "system"
    first = next((m for m in kept if m.kind not in ("system", "note")), None)
    return "system" if first is None or first.kind == "user" else "user_preamble"


def place_summary(
    summary_text: str, kept: Sequence[MessageView], provider: str = "anthropic"
) -> tuple[Placement, str]:
    """``(placement, text)`` of the summary block for ``provider``; the text of a
    user preamble starts with :data:`USER_PREAMBLE_HEAD`. ``text`` is ``""``
    when there is no summary."""
    placement = summary_placement(kept, provider)
    if not summary_text:
        return placement, ""
    if placement == "user_preamble":
        return placement, f"{USER_PREAMBLE_HEAD}\n{summary_text}"
    return placement, summary_text
