"""Reads of a slice in a provider's JSON shape that always join into a valid request.

OpenAI and Anthropic requests, and Responses input items (kept in
transcript order, so every cut joins; they are paged here so that every
provider shape pages alike, by rendered item and with the same token).

A provider request is not the transcript message by message: results move
up behind their calls, a call followed by other messages without a result
gets a stand-in, Anthropic merges same-role neighbours and collects system
text. So a page or an incremental answer cut in transcript order can join
into a request the provider refuses (a result twice, a result before its
call, two user messages in a row). Here the whole view is rendered, and
pages and deltas are cut from the *rendered* list:

* **Incremental** (``since``): the view rendered as the caller held it
  (the messages up to ``since``) must be a prefix of the view now, element
  for element and with the same ``system``; then the answer is APPEND with
  the rest. Otherwise (a late result moved up, a stand-in replaced, a role
  merged across the boundary, new system text) it is REPLACE. Other
  incarnations, versions from the future and reshaping changes are REPLACE
  as in :mod:`ctxd_sidecar.core.contexts.views`.
* **Pages**: at most ``page_size`` elements and about
  :data:`~ctxd_sidecar.core.contexts.views.JSON_PAGE_BYTES`; the token
  names the element to continue at and a digest of everything delivered
  before it. A later page is rendered from the view then; when its first
  elements no longer match the digest (a change rewrote what was
  delivered), the token is stale: ABORTED, read again from the first page.

* **Tail reads** (``last``): the view rendered from the message
  :func:`~ctxd_sidecar.core.contexts.views.tail_start` picks (never inside a
  tool round), so stand-ins and pairing are decided over the whole tail;
  the token carries where the tail starts.

Whole views are rendered once per context and version and cached, so the
caller's previous read (the view it holds) is usually not rendered again;
a tail is rendered for each page read (it costs its own length).
"""

from __future__ import annotations

import hashlib
import weakref
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field

from ctxd_sidecar.core.contexts import pagetoken
from ctxd_sidecar.core.contexts.model import ContextState, Msg
from ctxd_sidecar.core.contexts.views import (
    APPEND,
    JSON_PAGE_BYTES,
    NONE,
    REPLACE,
    SLICE,
    page_size,
    tail_start,
)
from ctxd_sidecar.core.errors import Conflict, InvalidArgument
from ctxd_sidecar.core.providers import RESPONSES, join_units, render_parts
from ctxd_sidecar.core.providers.ids import IdMap

#: Renders kept per context: the view a caller holds and the view now.
_KEPT = 2


@dataclass(frozen=True, slots=True)
class Rendered:
    system: str
    #: Units of the messages array and their roles (see ``render_parts``).
    parts: list[str]
    roles: list[str]
    #: The digests of the first k parts (k → hex) and the hash after the
    #: last k taken ("hash" → (k, state)), so that the pages of one read
    #: hash each part once, not everything before it again.
    digests: dict = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class JsonPage:
    messages_json: str
    system_json: str
    next_token: str
    change: str


class _Cache:
    """Per context: the call-id map (extended as messages are appended) and
    the last few renders."""

    def __init__(self) -> None:
        self.ids: dict[str, tuple[tuple, int, IdMap]] = {}
        self.renders: dict[tuple, Rendered] = {}


_CACHES: weakref.WeakKeyDictionary[ContextState, _Cache] = weakref.WeakKeyDictionary()


def _cache(st: ContextState) -> _Cache:
    found = _CACHES.get(st)
    if found is None:
        found = _CACHES[st] = _Cache()
    return found


def _ids(st: ContextState, fmt: str) -> IdMap:
    cache = _cache(st)
    key = (st.gen, st.reshaped_at, st.live_from)
    msgs = st.messages
    held = cache.ids.get(fmt)
    if held is None or held[0] != key or (msgs and msgs[-1].seq < held[1]):
        held = (key, 0, IdMap(fmt))
    _, through, ids = held
    ids.extend(msgs[bisect_right(msgs, through, key=_seq) :])
    cache.ids[fmt] = (key, msgs[-1].seq if msgs else through, ids)
    return ids


def render(
    fmt: str,
    st: ContextState,
    *,
    upto: int | None = None,
    blocks: bool = True,
    mark: bool = False,
    start: int = 0,
) -> Rendered:
    """The view in ``fmt`` with the messages of versions up to ``upto``
    (all when None), from the message with seq ``start`` on (0: all); read
    without awaiting (``st`` is live)."""
    version = st.version if upto is None else upto
    key = (fmt, st.gen, version, blocks, mark, start)
    cache = _cache(st)
    found = cache.renders.get(key)
    if found is not None:
        return found
    msgs: list[Msg] = st.messages
    if start:
        msgs = msgs[bisect_left(msgs, start, key=_seq) :]
    if upto is not None:
        msgs = msgs[: bisect_right(msgs, upto, key=_ver)]
    ids = None if fmt == RESPONSES else _ids(st, fmt)  # Responses items keep their ids
    out = Rendered(*render_parts(fmt, st, msgs, ids=ids, blocks=blocks, cache_breakpoint=mark))
    if start:
        return out  # a tail costs its own length; keep the whole views cached
    cache.renders[key] = out
    while len(cache.renders) > _KEPT:
        cache.renders.pop(next(iter(cache.renders)))
    return out


def read(
    fmt: str,
    st: ContextState,
    *,
    size: int = 0,
    token: str = "",
    since: int | None = None,
    incarnation: str = "",
    blocks: bool = True,
    mark: bool = False,
    last: int = 0,
) -> JsonPage:
    """One page of the slice of ``st`` in ``fmt`` (see the module docstring);
    ``last``: a tail read of the last ``last`` messages (first page only)."""
    limit = page_size(size)
    if token:
        if since is not None:
            raise InvalidArgument("since_version", "goes with the first page only; omit it")
        gen, at, digest, change, start = _decode(token, fmt)
        now = render(fmt, st, blocks=blocks, mark=mark, start=start)
        _check(st, now, gen, at, digest)
        return _page(fmt, st, now, at, limit, change, system="", start=start)
    if since is None and last > 0:
        msgs = st.messages
        i = tail_start(msgs, len(msgs) - last)
        start = msgs[i].seq if 0 < i < len(msgs) else 0
        now = render(fmt, st, blocks=blocks, mark=mark, start=start)
        return _page(fmt, st, now, 0, limit, "", now.system, start=start)
    now = render(fmt, st, blocks=blocks, mark=mark)
    if since is None:
        return _page(fmt, st, now, 0, limit, "", now.system)
    if since < 0:
        raise InvalidArgument("since_version", "must not be negative")
    if incarnation and incarnation != st.gen:
        return _page(fmt, st, now, 0, limit, REPLACE, now.system)
    if since == st.version:
        return JsonPage("[]", "", "", NONE)
    if since > st.version or since < st.reshaped_at:
        return _page(fmt, st, now, 0, limit, REPLACE, now.system)
    held = render(fmt, st, upto=since, blocks=blocks, mark=mark)
    n = len(held.parts)
    if (
        held.system == now.system
        and now.parts[:n] == held.parts
        and now.roles[:n] == held.roles
        and not _merges_at(now, n)
    ):
        return _page(fmt, st, now, n, limit, APPEND, "")
    return _page(fmt, st, now, 0, limit, REPLACE, now.system)


def _page(
    fmt: str,
    st: ContextState,
    now: Rendered,
    at: int,
    limit: int,
    change: str,
    system: str,
    start: int = 0,
) -> JsonPage:
    budget = JSON_PAGE_BYTES - len(system.encode())
    end = at
    while end < len(now.parts) and end - at < limit:
        cost = len(now.parts[end].encode()) + 32
        if end > at and cost > budget:
            break
        budget -= cost
        end += 1
    token = _encode(st, fmt, now, end, change, start) if end < len(now.parts) else ""
    messages = join_units(now.parts[at:end], now.roles[at:end])
    return JsonPage(messages, system, token, change)


def _merges_at(now: Rendered, n: int) -> bool:
    """Whether the units either side of ``n`` form one message (an
    Anthropic user message continued): no append of whole messages there."""
    return 0 < n < len(now.roles) and now.roles[n] == now.roles[n - 1]


def _digest(now: Rendered, k: int) -> str:
    """A digest of ``now``'s system and first ``k`` parts, each hashed once
    per render however many pages ask (:attr:`Rendered.digests`)."""
    done = now.digests.get(k)
    if done is not None:
        return done
    at, h = now.digests.get("hash", (0, None))
    if h is None or at > k:
        at, h = 0, hashlib.sha256(now.system.encode())
    else:
        h = h.copy()
    roles = now.roles
    for i in range(at, k):
        h.update(roles[i].encode() if roles else b"")
        h.update(b"\0")
        h.update(now.parts[i].encode())
    now.digests["hash"] = (k, h)
    out = now.digests[k] = h.hexdigest()[:24]
    return out


def _encode(st: ContextState, fmt: str, now: Rendered, at: int, change: str, start: int) -> str:
    """``start``: the seq a tail read starts at (0: the whole view)."""
    return pagetoken.pack(pagetoken.PROVIDER, st.gen, fmt, at, _digest(now, at), change, start)


def _decode(token: str, fmt: str) -> tuple[str, int, str, str, int]:
    """``(gen, at, digest, change, start)`` of a token of this view."""
    gen, tfmt, at, digest, change, *rest = pagetoken.unpack(token, pagetoken.PROVIDER, 6, 1)
    start = rest[0] if rest else 0
    if not (
        isinstance(gen, str)
        and tfmt == fmt
        and pagetoken.is_count(at)
        and at > 0
        and isinstance(digest, str)
        and change in ("", APPEND, REPLACE)
        and pagetoken.is_count(start)
    ):
        raise pagetoken.bad()
    return gen, at, digest, change, start


def _check(st: ContextState, now: Rendered, gen: str, at: int, digest: str) -> None:
    """A later page continues what the earlier pages delivered, or ABORTED."""
    if gen != st.gen or at > len(now.parts) or _digest(now, at) != digest:
        raise Conflict(
            f"context {st.id} changed what the earlier pages of this read hold (a compaction, "
            "a plan change, a late tool result or a re-creation); read again from the first page"
        )


def _ver(m: Msg) -> int:
    return m.ver


def _seq(m: Msg) -> int:
    return m.seq


__all__ = ["SLICE", "JsonPage", "read", "render"]
