"""Paged and incremental reads of a context's messages.

Every reply must fit a client with default limits (gRPC's 4 MiB), whatever
the context's size, so messages come in pages: at most ``page_size``
messages (default :data:`DEFAULT_PAGE_SIZE`, at most :data:`MAX_PAGE_SIZE`)
and about :data:`PAGE_BYTES` of them, never fewer than one. A page token
names the incarnation, the last reshaping change and the last message
returned: appends in between do not move it (the next page starts after
that message); a compaction or plan change in between makes it stale
(ABORTED: read again from the first page).

An incremental read names the version the caller holds, and the
incarnation it belongs to: a conversation deleted and created again starts
its versions over, so a version alone may name a message of the old
transcript. When only messages were appended since, the answer is just
those (APPEND, or NONE); when anything reshaped the view since (a
compaction, a plan change: the context's ``reshaped_at``) or the version
cannot be related (another incarnation, a version from the future), the
answer is the whole view (REPLACE). A turn's read then costs the turn, not
the history. Without an incarnation (clients that predate it) the version
alone decides, as it always did.

A tail read (``last``) starts at the last ``last`` messages, moved back
(:func:`tail_start`) so it never opens inside a tool round: a result in
the tail brings the call it answers, and a Responses ``reasoning`` item
stays with the item after it. It holds at least ``last`` messages.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import OrderedDict
from dataclasses import dataclass, field
from itertools import accumulate
from operator import attrgetter

from ctxd_sidecar.core.compaction.view import binds_next
from ctxd_sidecar.core.contexts import pagetoken
from ctxd_sidecar.core.contexts.model import ASSISTANT, TOOL, ContextState, Msg
from ctxd_sidecar.core.errors import Conflict, InvalidArgument

DEFAULT_PAGE_SIZE = 1000
MAX_PAGE_SIZE = 10_000
#: Message bytes per page (text, JSON, ids); the rest of a reply stays well
#: under a default client's 4 MiB.
PAGE_BYTES = 3 * 1024 * 1024
#: What a page in a JSON shape may take (messages and system JSON), under a
#: default client's 4 MiB with room for the rest of the reply.
JSON_PAGE_BYTES = 3 * 1024 * 1024 + 768 * 1024
#: What a message costs in a reply beyond its text (ids, field tags).
MESSAGE_FRAME_BYTES = 64

FULL, SLICE = "full", "slice"
NONE, APPEND, REPLACE = "none", "append", "replace"
#: Longest ``since_incarnation`` accepted (incarnations are 8 hex digits).
MAX_INCARNATION = 128
_NBYTES = attrgetter("nbytes")


@dataclass(frozen=True)
class Page:
    messages: list[Msg]
    next_token: str = ""
    #: "" (not incremental), NONE, APPEND or REPLACE.
    change: str = ""
    #: Whether the page starts the view (the slice's summary and plan blocks lead it).
    first: bool = True
    blocks: list[str] = field(default_factory=list)


def page_size(requested: int) -> int:
    if requested < 0:
        raise InvalidArgument("page_size", "must not be negative")
    return min(requested or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)


def message_bytes(m: Msg) -> int:
    return m.size_bytes + MESSAGE_FRAME_BYTES


def read(
    st: ContextState,
    view: str,
    *,
    size: int = 0,
    token: str = "",
    since: int | None = None,
    incarnation: str = "",
    last: int = 0,
) -> Page:
    """One page of ``view`` of ``st`` (read without awaiting: ``st`` is live);
    ``since``/``incarnation``: what the caller holds (an incremental read);
    ``last``: start the first page at the last ``last`` messages (a tail read)."""
    limit = page_size(size)
    msgs = st.messages
    if token:
        if since is not None:
            raise InvalidArgument("since_version", "goes with the first page only; omit it")
        after, change = _decode(token, st, view)
        start = _index_after(msgs, after)
        return _page(st, view, msgs, start, limit, change, first=False)
    if since is None:
        start = tail_start(msgs, len(msgs) - last) if last > 0 else 0
        return _page(st, view, msgs, start, limit, "", first=True)
    if since < 0:
        raise InvalidArgument("since_version", "must not be negative")
    if incarnation and incarnation != st.gen:
        # Held from another incarnation: its versions relate to nothing here.
        return _page(st, view, msgs, 0, limit, REPLACE, first=True)
    if since == st.version:
        return Page([], change=NONE, first=False)
    if since > st.version or since < st.reshaped_at:
        return _page(st, view, msgs, 0, limit, REPLACE, first=True)
    start = bisect_right(msgs, since, key=_ver)  # ver grows along the transcript
    return _page(st, view, msgs, start, limit, APPEND, first=False)


def tail_start(msgs: list[Msg], start: int) -> int:
    """Where a tail read that would start at ``start`` starts: moved back to
    the call of every tool result in the tail (a result answers the latest
    earlier call with its id) and before a Responses reasoning item bound
    to the first message. Costs the messages it moves over; a result whose
    call is nowhere (none should be) does not move it."""
    if start <= 0:
        return 0
    nowhere: set[str] = set()
    while True:
        at, missing = _back(msgs, start, nowhere)
        if not missing:
            return at
        nowhere |= missing


def _back(msgs: list[Msg], start: int, nowhere: set[str]) -> tuple[int, set[str]]:
    made: set[str] = set()
    need: set[str] = set()
    for m in msgs[start:]:
        if m.kind == ASSISTANT:
            made.update(c.id for c in m.tool_calls)
        elif m.kind == TOOL and m.call_id not in made and m.call_id not in nowhere:
            need.add(m.call_id)
    at = start
    while at > 0 and (need or binds_next(msgs[at - 1])):
        at -= 1
        m = msgs[at]
        if m.kind == ASSISTANT:
            need.difference_update(c.id for c in m.tool_calls)
        elif m.kind == TOOL and m.call_id not in nowhere:
            need.add(m.call_id)
    return at, need


def _page(
    st: ContextState, view: str, msgs: list[Msg], start: int, limit: int, change: str, first: bool
) -> Page:
    blocks = st.slice_blocks() if first and view == SLICE else []
    budget = PAGE_BYTES - sum(len(b.encode()) + MESSAGE_FRAME_BYTES for b in blocks)
    end = start + _ENDS.fitting(msgs, start, limit, budget)
    token = _encode(st, view, msgs[end - 1].seq, change) if end < len(msgs) and end > start else ""
    return Page(msgs[start:end], token, change, first, blocks)


def _fitting(window: list[Msg], budget: int) -> int:
    """How many of ``window``, from its start, fit in ``budget`` bytes (at
    least one). Sizes are read in C (``nbytes``, once each message knows
    it); usually the whole window fits, and otherwise the running totals
    grow, so a bisection finds the last one that fits."""
    if not window:
        return 0
    sizes = list(map(_NBYTES, window))
    if min(sizes) < 0:  # not measured yet
        sizes = [m.size_bytes for m in window]
    if sum(sizes) + MESSAGE_FRAME_BYTES * len(sizes) <= budget:
        return len(sizes)
    spent = list(accumulate(n + MESSAGE_FRAME_BYTES for n in sizes))
    return max(1, bisect_right(spent, budget))


class _Ends:
    """How many messages pages that start at a message held, for the next
    read of the same pages (up to :attr:`CAP` of them, least recently used
    first out): measuring a page's window costs a visit to every message
    object in it. A page is found by its first message object, the limit
    and the budget, and trusted only if the same objects still stand at its
    last place and at the first place past it, the one that did not fit (a
    page of ``limit`` messages has none). A transcript changes only at its
    ends (appends, truncation at the tail, compaction at the head), so the
    messages between are the same."""

    CAP = 4096

    def __init__(self) -> None:
        self._held: OrderedDict[tuple[int, int, int], tuple[Msg, Msg, Msg | None, int]] = (
            OrderedDict()
        )

    def fitting(self, msgs: list[Msg], start: int, limit: int, budget: int) -> int:
        """:func:`_fitting` of ``msgs[start : start + limit]``."""
        if start >= len(msgs):
            return 0
        first = msgs[start]
        key = (id(first), limit, budget)
        held = self._held.get(key)
        if held is not None:
            was, last, past, n = held
            end = start + n
            if (
                was is first
                and end <= len(msgs)
                and msgs[end - 1] is last
                and (past is None or (end < len(msgs) and msgs[end] is past))
            ):
                self._held.move_to_end(key)
                return n
        n = _fitting(msgs[start : start + limit], budget)
        end = start + n
        if n == limit or end < len(msgs):  # a page the end of the transcript cut is not kept
            past = None if n == limit else msgs[end]
            self._held[key] = (first, msgs[end - 1], past, n)
            if len(self._held) > self.CAP:
                self._held.popitem(last=False)
        return n


_ENDS = _Ends()


def _index_after(msgs: list[Msg], seq: int) -> int:
    return bisect_right(msgs, seq, key=_seq)


def _ver(m: Msg) -> int:
    return m.ver


def _seq(m: Msg) -> int:
    return m.seq


def _encode(st: ContextState, view: str, after_seq: int, change: str) -> str:
    return pagetoken.pack(pagetoken.TRANSCRIPT, st.gen, st.reshaped_at, view, after_seq, change)


def _decode(token: str, st: ContextState, view: str) -> tuple[int, str]:
    gen, reshaped, tview, after, change = pagetoken.unpack(token, pagetoken.TRANSCRIPT, 5)
    # A token comes back from the client: every part is checked before use.
    if not (
        pagetoken.is_count(reshaped)
        and pagetoken.is_count(after)
        and isinstance(gen, str)
        and tview == view
        and change in ("", APPEND, REPLACE)
    ):
        raise pagetoken.bad()
    if gen != st.gen or reshaped != st.reshaped_at:
        raise Conflict(
            f"context {st.id} was compacted, re-planned or re-created since the first page; "
            "read again from the first page"
        )
    return after, change
