"""The context record and its parts, as plain Python objects.

:class:`ContextState` is everything ctxd knows about one conversation.
Messages (:class:`Msg`) are immutable once appended and carry their token
estimate, so the record's counters move in O(1) per message. Every type here
has a compact JSON form (``to_dict``/``from_dict``) used by the durable
layout (:mod:`ctxd_sidecar.core.contexts.persistence`); nothing here does I/O.

:class:`Msg` satisfies :class:`ctxd_sidecar.core.compaction.view.MessageView`
(``kind``, ``id``, ``text``, ``tool_calls``, ``call_id``, ``name``,
``content``, ``is_error``, ``principal``, ``tokens``).
"""

from __future__ import annotations

import base64
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Protocol

from ctxd_sidecar.core.compaction.summary import Summary
from ctxd_sidecar.core.contexts.calls import CallBook
from ctxd_sidecar.core.contexts.tokens import DEFAULT_MODEL_WINDOW, Calibration
from ctxd_sidecar.core.estimate import MESSAGE_OVERHEAD, estimate_message, estimate_text
from ctxd_sidecar.core.heap import acyclic
from ctxd_sidecar.core.plan import Plan
from ctxd_sidecar.core.skills.model import SkillRef

ROOT_ID = "root"
#: Context kinds.
ROOT = "root"
CONVERSATION = "conversation"

#: Message kinds.
SYSTEM, USER, ASSISTANT, TOOL, NOTE = "system", "user", "assistant", "tool", "note"
KINDS = (SYSTEM, USER, ASSISTANT, TOOL, NOTE)

#: Rough per-message memory overhead (objects, dict slots) for the cache's byte cap.
MSG_MEMORY_OVERHEAD = 200


def message_id(seq: int) -> str:
    """Stable message id: ``m`` + a per-context sequence number never reused."""
    return f"m{seq}"


# -- messages -----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    #: Arguments as JSON text ("" means none).
    arguments_json: str = ""


@dataclass(frozen=True, slots=True)
class Native:
    """A writer's own form of a message (e.g. an OpenAI Responses item), kept
    byte for byte beside ctxd's projection of it. ctxd reads only its own
    format, a Responses item (checked to stand for its message:
    :func:`ctxd_sidecar.core.providers.responses.check_native`)."""

    #: A name the writer picks for the shape of ``data``.
    format: str
    data: bytes

    def to_list(self) -> list[str]:
        return [self.format, base64.b64encode(self.data).decode("ascii")]

    @classmethod
    def from_list(cls, v: list[str]) -> Native:
        return cls(str(v[0]), base64.b64decode(v[1]))


@dataclass(slots=True)
class Msg:
    """One transcript entry. Fields a kind does not use stay empty.

    ``content`` is a tool result's JSON text (``content_json``) or plain text.
    ``seq``/``ts`` are assigned when the message is appended (:meth:`assigned`
    returns a new object). Treat a message as immutable once appended: it is
    shared by the record, its segments and readers. (Not a frozen dataclass
    only because those are several times slower to build, which restore
    does for every message.)
    """

    kind: str
    text: str = ""
    principal: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    call_id: str = ""
    name: str = ""
    content: str = ""
    content_json: bool = False
    is_error: bool = False
    seq: int = 0
    ts: int = 0
    tokens: int = -1
    #: The context version whose change appended it (incremental reads).
    ver: int = 0
    #: The writer's own form of the message, when it sent one.
    native: Native | None = None
    #: Its encoded form in replies, kept by the first read that encodes it or
    #: found in its sealed segment (messages never change once appended; see
    #: ctxd_sidecar.server.wire).
    wire: bytes | memoryview | None = field(default=None, repr=False, compare=False)
    #: ``size_bytes``, computed once.
    nbytes: int = field(default=-1, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.tokens < 0:
            self.tokens = estimate_message(self)

    @property
    def id(self) -> str:
        return message_id(self.seq)

    @property
    def size_bytes(self) -> int:
        """Bytes of text/JSON the message stores (checkpoint and JSON size accounting)."""
        n = self.nbytes
        if n < 0:
            n = len(self.text.encode()) + len(self.content.encode())
            for c in self.tool_calls:
                n += len(c.arguments_json.encode()) + len(c.name.encode()) + len(c.id.encode())
            if self.native is not None:
                n += len(self.native.data) + len(self.native.format)
            self.nbytes = n
        return n

    @property
    def carried_bytes(self) -> int:
        """Bytes the sender gave (the max_message_bytes measure): a message
        with a native payload carries the provider's item, and its text and
        tool calls are read out of that item, so the larger of the two counts."""
        if self.native is None:
            return self.size_bytes
        native = len(self.native.data) + len(self.native.format)
        return max(native, self.size_bytes - native)

    @property
    def memory_bytes(self) -> int:
        """Approximate memory the cache holds for this message."""
        n = len(self.text) + len(self.content) + MSG_MEMORY_OVERHEAD
        if self.native is not None:
            n += len(self.native.data)
        if self.tool_calls:  # most have none: no iterator to build
            for c in self.tool_calls:
                n += len(c.arguments_json) + len(c.name) + len(c.id) + 64
        return n

    def assigned(self, seq: int, ts: int, ver: int = 0) -> Msg:
        return Msg(
            self.kind,
            self.text,
            self.principal,
            self.tool_calls,
            self.call_id,
            self.name,
            self.content,
            self.content_json,
            self.is_error,
            seq,
            ts,
            self.tokens,
            ver,
            self.native,
        )

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"seq": self.seq, "ts": self.ts, "kind": self.kind}
        if self.text:
            d["text"] = self.text
        if self.principal:
            d["principal"] = self.principal
        if self.tool_calls:
            d["calls"] = [[c.id, c.name, c.arguments_json] for c in self.tool_calls]
        if self.call_id:
            d["call_id"] = self.call_id
        if self.name:
            d["name"] = self.name
        if self.content:
            d["content"] = self.content
        if self.content_json:
            d["json"] = True
        if self.is_error:
            d["error"] = True
        if self.ver:
            d["v"] = self.ver
        if self.native is not None:
            d["nat"] = self.native.to_list()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Msg:
        calls = d.get("calls")
        return cls(
            d["kind"],
            d.get("text", ""),
            d.get("principal", ""),
            tuple(ToolCall(c[0], c[1], c[2]) for c in calls) if calls else (),
            d.get("call_id", ""),
            d.get("name", ""),
            d.get("content", ""),
            bool(d.get("json", False)),
            bool(d.get("error", False)),
            int(d["seq"]),
            int(d.get("ts", 0)),
            ver=int(d.get("v", 0)),
            native=Native.from_list(d["nat"]) if "nat" in d else None,
        )


# -- the record ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SegmentRef:
    """A sealed segment: messages ``first..last`` (seq), written at ``version``."""

    first: int
    last: int
    count: int
    version: int

    def to_list(self) -> list[int]:
        return [self.first, self.last, self.count, self.version]

    @classmethod
    def from_list(cls, v: list[int]) -> SegmentRef:
        return cls(int(v[0]), int(v[1]), int(v[2]), int(v[3]))


@dataclass(frozen=True, slots=True)
class ContextInfo:
    """The listing view of a context."""

    id: str
    kind: str
    version: int
    turns: int
    est_tokens: int
    updated: int
    created: int
    message_count: int
    model_window: int
    archived: bool = False
    #: The incarnation (``ContextState.gen``): versions of a conversation
    #: deleted and created again start over, so a version alone is ambiguous.
    incarnation: str = ""
    forked_from: str = ""
    forked_at_version: int = 0


class SealedMessages(Protocol):
    """Sealed messages a restore read but has not built yet
    (``segments.SealedRun``): what the state needs of them before then."""

    def memory_bytes(self) -> int: ...
    def tool_ids(self) -> list[tuple[str, bool]]: ...
    def build(self) -> list[Msg]: ...


@dataclass(eq=False)
class ContextState:
    """The whole record of one context, plus the bookkeeping that maps it
    onto the durable layout.

    Counters (``msg_count``, ``msg_tokens``) are kept even when only the head
    and the log tail were read (``loaded`` False: a listing peek), so
    listing never needs the sealed segments.
    """

    id: str
    kind: str
    #: Incarnation, in log and segment keys: a re-created id never sees the old one's leftovers.
    gen: str
    version: int = 0
    created: int = 0
    updated: int = 0
    turns: int = 0
    principal: str = ""
    task: str = ""
    model: str = ""
    model_window: int = DEFAULT_MODEL_WINDOW
    archived: bool = False
    #: The transcript, read through :attr:`messages`; sealed runs a restore
    #: has not built yet (``unbuilt``) come before it.
    built: list[Msg] = field(default_factory=list, repr=False)
    unbuilt: list[SealedMessages] = field(default_factory=list, repr=False)
    next_seq: int = 1
    summary: Summary = field(default_factory=Summary)
    skills: list[SkillRef] = field(default_factory=list)
    plan: Plan | None = None
    #: The last preflight verdict as JSON text ("" when none).
    preflight: str = ""
    calibration: Calibration = field(default_factory=Calibration)
    #: Recent idempotency keys -> the result first returned (oldest first).
    idem: OrderedDict[str, dict[str, Any]] = field(default_factory=OrderedDict)
    idem_cap: int = 256
    # counters, valid with or without the messages loaded
    msg_count: int = 0
    msg_tokens: int = 0
    block_tokens: int = 0  # estimate of the summary and plan blocks (system messages)
    #: Approximate memory held (for the cache's byte cap).
    memory_bytes: int = 0
    #: Tool calls of the live transcript, and which have their result.
    calls: CallBook = field(default_factory=CallBook)
    #: Calls folded without a result (abandoned): a late result is accepted, the call restated.
    abandoned: dict[str, ToolCall] = field(default_factory=dict)
    # durable-layout bookkeeping
    head_version: int = 0
    head_etag: str | None = None
    segments: list[SegmentRef] = field(default_factory=list)
    sealed_through: int = 0  # highest message seq already in a sealed segment
    unsealed_bytes: int = 0  # bytes of messages appended since the last sealed segment
    live_from: int = 1  # first message seq not folded away by compaction
    #: Log records up to here are sealed (or gone); later ones up to head_version wait or are kept.
    swept_through: int = 0
    #: Segments no head names any more, waiting for the janitor to delete them.
    dropped: list[SegmentRef] = field(default_factory=list)
    #: Clean-up already handed to the janitor (this process only).
    sweep_queued: int = 0
    drop_queued: set[SegmentRef] = field(default_factory=set)
    #: An unversioned change (calibration, archive flag) waits for the head.
    dirty: bool = False
    #: False for a listing peek (head + log tail only, no segments).
    loaded: bool = True
    #: The incarnation ended: a ``deleted`` record fenced it (see :mod:`.deletion`).
    deleted: bool = False
    #: A new incarnation's creation overwrites the deleted one's head still stored (this etag).
    replaces_head: str | None = None
    #: Version of the last change that reshaped the views beyond appending
    #: (a compaction, a plan change): incremental reads from before it rebuild.
    reshaped_at: int = 0
    #: The compactions of this context, oldest first (bounded).
    compactions: list[dict[str, Any]] = field(default_factory=list)
    #: Segments holding only folded messages, kept for ExpandCompaction:
    #: ``(segment, archived_ms)``, oldest first.
    archive: list[tuple[SegmentRef, int]] = field(default_factory=list)
    #: Folded messages not yet in any segment (the next checkpoint archives them).
    unarchived: list[Msg] = field(default_factory=list)
    #: Message seqs removed by truncation, as ``[first, last]`` ranges: sealed
    #: segments may still hold them, so reads of segments leave them out.
    cut: list[list[int]] = field(default_factory=list)
    #: (:mod:`.history`) head copies kept, segments held for them, copies expired.
    hist: list[list[int]] = field(default_factory=list)
    held: list[tuple[SegmentRef, int]] = field(default_factory=list)
    hist_gone: list[int] = field(default_factory=list)
    #: A fork's ancestors, nearest first: ``[id, gen, version forked at]`` (see :mod:`.forks`).
    lineage: list[list] = field(default_factory=list)

    # -- derived ---------------------------------------------------------------------
    @property
    def messages(self) -> list[Msg]:
        """The live transcript, oldest first (built on first use after a restore)."""
        if self.unbuilt:
            runs, self.unbuilt = self.unbuilt, []
            with acyclic():
                self.built[:0] = [m for run in runs for m in run.build()]
        return self.built

    @messages.setter
    def messages(self, msgs: list[Msg]) -> None:
        self.built, self.unbuilt = msgs, []

    @property
    def raw_tokens(self) -> int:
        return self.msg_tokens + self.block_tokens

    @property
    def est_tokens(self) -> int:
        return self.calibration.apply(self.raw_tokens)

    @property
    def exists(self) -> bool:
        """A conversation exists once its first change is durable (and until a
        deletion fences it); root always."""
        return not self.deleted and (self.kind == ROOT or self.version > 0)

    def info(self) -> ContextInfo:
        return ContextInfo(
            self.id,
            self.kind,
            self.version,
            self.turns,
            self.est_tokens,
            self.updated,
            self.created,
            self.msg_count,
            self.model_window,
            self.archived,
            self.gen,
            *(self.lineage[0][::2] if self.lineage else ()),
        )

    def refresh_blocks(self) -> None:
        """Recount the summary and plan blocks (after either changed)."""
        n = 0
        for text in (self.summary.render(), self.plan.render() if self.plan else ""):
            if text:
                n += estimate_text(text) + MESSAGE_OVERHEAD
        self.block_tokens = n

    def slice_blocks(self) -> list[str]:
        """System texts sent before the transcript: summary, then plan."""
        out = []
        summary = self.summary.render()
        if summary:
            out.append(summary)
        if self.plan is not None:
            out.append(self.plan.render())
        return out

    # -- message bookkeeping -------------------------------------------------------------
    def add_message(self, m: Msg) -> None:
        """Append a new message (counted)."""
        if self.loaded:
            self.built.append(m)  # after any unbuilt runs: those are older
            self.memory_bytes += m.memory_bytes
            self.calls.add(m)
        self.msg_count += 1
        self.msg_tokens += m.tokens
        self.unsealed_bytes += m.size_bytes
        self.next_seq = m.seq + 1

    def load_sealed(self, run: SealedMessages) -> None:
        """Add a run of sealed messages (oldest first, before any message
        added yet; already in the head's counters)."""
        self.unbuilt.append(run)
        self.memory_bytes += run.memory_bytes()
        for call_id, result in run.tool_ids():
            self.calls.track(call_id, result=result)

    def unsealed(self) -> list[Msg]:
        """The messages after ``sealed_through`` (never in an unbuilt run)."""
        msgs = self.built
        i = len(msgs)
        while i > 0 and msgs[i - 1].seq > self.sealed_through:
            i -= 1
        return msgs[i:]

    def forget_messages(self) -> None:
        """Drop the transcript from memory (an ended incarnation)."""
        self.built, self.unbuilt = [], []

    def fold_messages(self, through_seq: int) -> list[Msg]:
        """Drop the live messages up to ``through_seq`` (compaction's fold) and
        return them; counters, known call ids and the durable bookkeeping
        follow. Works on a listing peek too only if the caller restores the
        record first (a peek has no messages to drop)."""
        if not self.loaded:
            raise RuntimeError("fold_messages needs the whole record loaded")
        n = 0
        while n < len(self.messages) and self.messages[n].seq <= through_seq:
            n += 1
        folded, self.messages = self.messages[:n], self.messages[n:]
        self._uncount(folded)
        self.live_from = max(self.live_from, through_seq + 1)
        return folded

    def _uncount(self, gone: list[Msg]) -> None:
        """Counters and known call ids without ``gone``, just taken off the
        live messages."""
        for m in gone:
            self.msg_count -= 1
            self.msg_tokens -= m.tokens
            self.memory_bytes -= m.memory_bytes
            if m.seq > self.sealed_through:
                self.unsealed_bytes -= m.size_bytes
        if gone:
            self.calls = CallBook.of(self.messages)

    def is_cut(self, seq: int) -> bool:
        """Whether truncation removed message ``seq``."""
        return any(a <= seq <= b for a, b in self.cut)

    def truncate_from(self, from_seq: int) -> list[Msg]:
        """Remove the live messages from ``from_seq`` on (truncation) and
        return them; counters, call ids and the cut ranges follow. Message
        ids are never reused: the next message still takes ``next_seq``."""
        msgs = self.messages
        n = len(msgs)
        while n > 0 and msgs[n - 1].seq >= from_seq:
            n -= 1
        removed, self.messages = msgs[n:], msgs[:n]
        self._uncount(removed)
        last = self.next_seq - 1
        if from_seq <= last:
            if self.cut and self.cut[-1][1] + 1 >= from_seq:
                self.cut[-1] = [min(self.cut[-1][0], from_seq), last]
            else:
                self.cut.append([from_seq, last])
        return removed

    def remember(self, key: str, result: dict[str, Any]) -> None:
        self.idem[key] = result
        self.idem.move_to_end(key)
        while len(self.idem) > self.idem_cap:
            self.idem.popitem(last=False)
