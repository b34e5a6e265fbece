"""Reading a context: the request, checked whole, and the one :func:`read`
that answers it from a context's record.

A :class:`ReadRequest` cannot be built with fields that do not go together
(each refusal names the field, prefixed ``read.`` inside a turn). :func:`read`
picks the pager: a slice in a provider's JSON shape is cut from the rendered
request (:mod:`ctxd_sidecar.core.providers.pages`, so pages and deltas join
into a valid request); every other read is cut in transcript order
(:mod:`.views`), and a page in ctxd's own JSON shape is made smaller while
its JSON is over :data:`~.views.JSON_PAGE_BYTES`. That shape is protobuf's,
so the adapter hands in how a page of it is written (``ctxd_json``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ctxd_sidecar.core import providers
from ctxd_sidecar.core.contexts import views
from ctxd_sidecar.core.contexts.model import ContextState, Msg
from ctxd_sidecar.core.errors import InvalidArgument
from ctxd_sidecar.core.providers import pages as provider_pages

INFO = "info"
VIEWS = (views.FULL, views.SLICE, INFO)
#: ``consistency``: "" follows ``contexts.read_consistency``.
LATEST, CACHED = "latest", "cached"
#: Formats whose slice is cut from the rendered provider request (all but
#: ctxd's own, which protobuf writes, one message at a time).
PROVIDER_PAGED = (providers.OPENAI, providers.ANTHROPIC, providers.RESPONSES)

#: ``(st, page, blocks)`` → ``(messages_json, system_json)`` of a page in ctxd's JSON shape.
CtxdJson = Callable[[ContextState, views.Page, bool], tuple[str, str]]


@dataclass(frozen=True, slots=True)
class ReadRequest:
    """A read of one context, checked when built (see the module docstring)."""

    context_id: str = ""
    view: str = views.FULL
    consistency: str = ""
    #: The version the caller holds (an incremental read), or None.
    since: int | None = None
    #: The incarnation ``since`` belongs to ("": the version alone decides).
    incarnation: str = ""
    page_size: int = 0
    page_token: str = ""
    #: "" or a message format of the slice (``providers.FORMATS``).
    fmt: str = ""
    last_n: int = 0
    cache_breakpoint: bool = False
    #: Whether the slice's summary and plan blocks lead its first page.
    blocks: bool = True
    #: A version to read as it was (0: the latest).
    at_version: int = 0
    #: Prefixes the field named in a refusal (``read.`` inside an AppendTurnRequest).
    prefix: str = field(default="", compare=False, repr=False)

    def __post_init__(self) -> None:
        f = self.prefix
        if self.view not in VIEWS:
            raise InvalidArgument(f"{f}view", f"unknown view {self.view!r}")
        if self.consistency not in ("", LATEST, CACHED):
            raise InvalidArgument(f"{f}consistency", f"unknown consistency {self.consistency!r}")
        self._check_since(f)
        if self.page_size < 0:
            raise InvalidArgument(f"{f}page_size", "must not be negative")
        if self.fmt and self.fmt not in providers.FORMATS:
            raise InvalidArgument(f"{f}format", f"unknown message format {self.fmt!r}")
        if self.fmt and self.view != views.SLICE:
            raise InvalidArgument(f"{f}format", "goes with CONTEXT_VIEW_SLICE")
        if self.last_n < 0:
            raise InvalidArgument(f"{f}last_n", "must not be negative (0 reads all)")
        if self.last_n and self.since is not None:
            raise InvalidArgument(
                f"{f}last_n", "goes without since_version (an incremental read is already a tail)"
            )
        if self.at_version < 0:
            raise InvalidArgument(f"{f}at_version", "must not be negative (0 reads the latest)")
        if self.at_version and self.since is not None:
            raise InvalidArgument(
                f"{f}at_version",
                "goes without since_version (an earlier version is read whole); send one of them",
            )

    def _check_since(self, f: str) -> None:
        if self.since is not None and self.since < 0:
            raise InvalidArgument(f"{f}since_version", "must not be negative")
        if self.incarnation and self.since is None:
            raise InvalidArgument(
                f"{f}since_incarnation",
                "goes with since_version (the incarnation of the version held); set both or "
                "neither",
            )
        if len(self.incarnation) > views.MAX_INCARNATION:
            raise InvalidArgument(
                f"{f}since_incarnation",
                f"is {len(self.incarnation)} characters; send back the ContextInfo.incarnation a "
                "read returned",
            )

    @property
    def latest(self) -> bool | None:
        """``latest`` for ContextService.get (None: the configured default).
        A later page goes on from the first, which checked the store; the
        token pins the view."""
        if self.page_token:
            return False
        return {"": None, LATEST: True, CACHED: False}[self.consistency]

    def in_turn(self, context_id: str) -> ReadRequest:
        """This read as the read-back of a turn appended to ``context_id``."""
        if self.context_id and self.context_id != context_id:
            raise InvalidArgument(
                f"{self.prefix}context_id", "must be empty or the turn's context_id"
            )
        if self.page_token:
            raise InvalidArgument(
                f"{self.prefix}page_token",
                "a turn's read starts at the first page; continue with GetContext",
            )
        if self.at_version:
            raise InvalidArgument(
                f"{self.prefix}at_version",
                "a turn's read reads the version the turn made; read earlier ones with GetContext",
            )
        return replace(self, context_id=context_id)

    def after_turn(self, replayed: bool) -> bool | None:
        """``latest`` for the read-back of a turn. A committed turn took the
        next version, so the cached copy holds every write acknowledged
        before the call (LATEST asks the store again for what came after); a
        replayed one committed nothing now and reads as GetContext would."""
        latest = self.latest
        return False if latest is None and not replayed else latest


@dataclass(frozen=True, slots=True)
class Reply:
    """One read's answer, before it is written for the wire."""

    view: str
    #: The page's messages (empty when the page is in a JSON shape).
    messages: list[Msg] = field(default_factory=list)
    next_token: str = ""
    #: "" (not incremental), NONE, APPEND or REPLACE.
    change: str = ""
    messages_json: str = ""
    system_json: str = ""
    #: Whether the slice's summary and plan blocks lead this page.
    blocks: bool = False


def read(st: ContextState, req: ReadRequest, ctxd_json: CtxdJson) -> Reply:
    """The answer to ``req`` from ``st``, read without awaiting (``st`` is live);
    ``ctxd_json`` writes a page in ctxd's own JSON shape."""
    if req.view == INFO:
        return Reply(INFO)
    if req.fmt in PROVIDER_PAGED:
        jp = provider_pages.read(
            req.fmt,
            st,
            size=req.page_size,
            token=req.page_token,
            since=req.since,
            incarnation=req.incarnation,
            mark=req.cache_breakpoint,
            blocks=req.blocks,
            last=req.last_n,
        )
        return Reply(req.view, [], jp.next_token, jp.change, jp.messages_json, jp.system_json)
    page = _page(st, req, req.page_size)
    if not req.fmt:
        blocks = page.first and req.blocks
        return Reply(req.view, page.messages, page.next_token, page.change, blocks=blocks)
    page, (messages, system) = _json_page(st, req, page, ctxd_json)
    return Reply(req.view, [], page.next_token, page.change, messages, system)


def _page(st: ContextState, req: ReadRequest, size: int) -> views.Page:
    return views.read(
        st,
        req.view,
        size=size,
        token=req.page_token,
        since=req.since,
        incarnation=req.incarnation,
        last=req.last_n,
    )


def _json_page(
    st: ContextState, req: ReadRequest, page: views.Page, ctxd_json: CtxdJson
) -> tuple[views.Page, tuple[str, str]]:
    """``page`` in ctxd's JSON shape, with fewer messages while its JSON is
    over :data:`~.views.JSON_PAGE_BYTES`: pages are sized by stored bytes,
    and escaping can take several times as much (``\\u0001``, quotes in
    JSON text)."""
    budget = views.JSON_PAGE_BYTES
    while True:
        out = ctxd_json(st, page, req.blocks)
        count = len(page.messages)
        if count <= 1 or sum(len(x) for x in out) * 4 <= budget:
            return page, out  # four bytes a character at most: no need to encode
        if sum(len(x.encode()) for x in out) <= budget:
            return page, out
        page = _page(st, req, count // 2)
