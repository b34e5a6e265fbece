"""Skills: named instruction bundles (the SKILL.md idiom) from MCP servers.

The catalogue is built from the MCP servers named in ``skills.servers``:

* **prompts** - every prompt without required arguments is a skill; the
  catalogue comes from ``prompts/list``, the body from ``prompts/get`` (its
  text parts joined by a blank line);
* **resources** - ``skill://<name>`` (any mimeType), ``skill://<name>/SKILL.md``
  (``text/markdown``; named ``<name>``), and any other URI whose mimeType is
  ``text/x-skill+markdown`` (named by the resource's name). The bare
  ``skill://`` index and deeper paths under a skill (its supporting files) are
  not skills.

A description is taken from the listing; "When to use:" / "Use when:" in it
splits off ``when_to_use``. An entry listed without a description is read
once per refresh and its front matter (``---`` block with ``description:``
and ``when_to_use:``) fills both. The catalogue name always comes from the
prompt name, the URI or the resource name (never the front matter), so a
reference resolves to the same entry whatever the body says. On a name
collision the first wins: available servers before unavailable ones, then
the order of ``skills.servers``, then prompts before resources.

Bodies are fetched on demand, capped at ``skills.max_body_bytes`` (cut on a
character boundary, a note appended), hashed with SHA-256 and cached in
memory by hash - never stored. A context records only ``[{name, hash}]``,
so a body edited on the server shows up as a different current hash
(:meth:`SkillCatalogue.stale`).

One long-lived MCP session per server, owned by a background task: it
connects (bounded by ``connect_timeout``), lists, refreshes every
``refresh_interval``, and on any failure reconnects with exponential
back-off up to ``max_backoff``. Calls made by requests are bounded by
``call_timeout``; a server that is not connected fails at once. So a server
that is down or slow never holds a turn longer than one call timeout, and its
skills stay in the catalogue with ``available=False``. Whenever the entries
change (not their availability) :attr:`SkillCatalogue.generation` increments;
the prompt uses it, with :meth:`SkillCatalogue.connected`, to rebuild a
frozen prompt prefix at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
import sys
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sidecar.config import McpServerSpec, SkillsConfig
from sidecar.core.errors import (
    FailedPrecondition,
    InvalidArgument,
    LimitExceeded,
    NotFound,
    Unavailable,
)

log = logging.getLogger(__name__)

SKILL_MIME = "text/x-skill+markdown"
SKILL_MD_MIMES = frozenset({"text/markdown", SKILL_MIME, ""})
SKILL_SCHEME = "skill://"

#: ``@skill:<name>``: the name starts with a letter or digit and runs over
#: ``[A-Za-z0-9._-]``; a trailing ``.`` is sentence punctuation, not part of
#: it ("see @skill:deploy." names ``deploy``). The same grammar decides which
#: skills a compaction keeps (sidecar.core.compaction.skills). Catalogue names
#: with other characters can still be loaded explicitly but not referenced.
REFERENCE_PREFIX = "@skill:"
_REFERENCE_RE = re.compile(r"@skill:([A-Za-z0-9][A-Za-z0-9._-]*)")
_WHEN_RE = re.compile(r"\b(?:when to use|use when)\s*:\s*", re.IGNORECASE)
#: Longest description / when_to_use kept in the catalogue (one line each).
MAX_DESCRIPTION_CHARS = 1024
#: Most pages read from one paginated list call.
MAX_PAGES = 50
#: Bodies read at once during a refresh (entries without a description, tracked skills).
DISCOVERY_READS = 8
#: First reconnect delay; doubles up to ``skills.max_backoff``.
INITIAL_BACKOFF = 0.5


def find_references(text: str) -> list[str]:
    """Skill names referenced as ``@skill:<name>``, deduplicated, in order of appearance."""
    out: list[str] = []
    for match in _REFERENCE_RE.finditer(text):
        name = match.group(1).rstrip(".")
        if name and name not in out:
            out.append(name)
    return out


def parse_front_matter(text: str) -> dict[str, str]:
    """The ``key: value`` pairs of a leading ``---`` block (a small YAML subset).

    Handles plain and quoted scalars, and ``>`` / ``|`` blocks or indented
    continuation lines (joined with spaces). Anything else is ignored.
    """
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        return {}
    out: dict[str, str] = {}
    key: str | None = None
    for line in lines[1:]:
        if line.strip() in {"---", "..."}:
            return {k: _unquote(v.strip()) for k, v in out.items()}
        if key is not None and line[:1] in {" ", "\t"} and line.strip():
            out[key] = f"{out[key]} {line.strip()}".strip()
            continue
        name, sep, value = line.partition(":")
        if not sep or not name.strip() or name[:1] in {" ", "\t", "#", "-"}:
            key = None
            continue
        key = name.strip().lower()
        value = value.strip()
        out[key] = "" if value in {">", "|", ">-", "|-"} else value
    return {}  # no closing fence: not front matter


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in {'"', "'"}:
        return value[1:-1]
    return value


def _one_line(text: str | None) -> str:
    line = " ".join((text or "").split())
    if len(line) > MAX_DESCRIPTION_CHARS:
        line = line[: MAX_DESCRIPTION_CHARS - 1] + "…"
    return line


def split_description(description: str | None) -> tuple[str, str]:
    """``(description, when_to_use)`` split at "When to use:" / "Use when:"."""
    text = _one_line(description)
    match = _WHEN_RE.search(text)
    if not match:
        return text, ""
    return text[: match.start()].strip(), text[match.end() :].strip()


def body_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def cap_body(text: str, max_bytes: int) -> tuple[str, bool]:
    """Cut ``text`` to ``max_bytes`` on a character boundary, with a note appended."""
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text, False
    head = data[:max_bytes].decode("utf-8", "ignore")
    return f"{head}\n\n[skill body truncated to skills.max_body_bytes = {max_bytes} bytes]", True


# -- state kept in the context record -------------------------------------------------------


@dataclass(frozen=True)
class SkillRef:
    """A loaded skill: its name and the SHA-256 of the body that was loaded."""

    name: str
    hash: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "hash": self.hash}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SkillRef:
        return cls(str(data["name"]), str(data["hash"]))


def refs_to_list(refs: Iterable[SkillRef]) -> list[dict[str, str]]:
    return [r.to_dict() for r in refs]


def refs_from_list(data: Iterable[Mapping[str, Any]]) -> list[SkillRef]:
    return [SkillRef.from_dict(d) for d in data]


# -- catalogue and results ------------------------------------------------------------------


@dataclass(frozen=True)
class SkillInfo:
    """One catalogue entry."""

    name: str
    description: str
    when_to_use: str
    #: The configured MCP server it comes from.
    server: str
    #: "prompt" or "resource".
    kind: str
    #: The prompt name or the resource URI on that server.
    locator: str
    #: False while its server is down or not answering.
    available: bool = True

    @property
    def source(self) -> str:
        """``<server>:<kind>``, e.g. ``docs:prompt``."""
        return f"{self.server}:{self.kind}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "when_to_use": self.when_to_use,
            "source": self.source,
            "available": self.available,
        }

    def signature(self) -> tuple[str, ...]:
        return (self.name, self.description, self.when_to_use, self.server, self.kind, self.locator)


@dataclass(frozen=True)
class SkillBody:
    name: str
    text: str
    hash: str
    truncated: bool


@dataclass(frozen=True)
class LoadResult:
    #: The context's loaded set after the load.
    refs: list[SkillRef]
    ref: SkillRef
    truncated: bool
    #: The name was already loaded with a different hash (the skill changed).
    changed: bool


@dataclass(frozen=True)
class PreloadResult:
    #: The context's loaded set afterwards (unchanged when nothing was loaded).
    refs: list[SkillRef]
    #: Skills loaded (or re-loaded with a new hash) by this call.
    loaded: list[SkillRef]
    #: Referenced names that are not in the catalogue.
    unknown: list[str]
    #: Referenced names that could not be loaded now -> why (server down, cap...).
    failed: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ResolvedSkill:
    """A loaded skill ready for the prompt."""

    name: str
    #: The hash the context loaded.
    hash: str
    #: The body to show; None when it is not cached and its server did not answer.
    text: str | None
    #: The hash the server serves now, when known.
    current_hash: str | None

    @property
    def changed(self) -> bool:
        return self.current_hash is not None and self.current_hash != self.hash


class BodyCache:
    """Skill bodies by SHA-256, bounded by total bytes (least recently used dropped)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, str] = OrderedDict()
        self._bytes = 0

    def get(self, digest: str) -> str | None:
        text = self._items.get(digest)
        if text is not None:
            self._items.move_to_end(digest)
        return text

    def put(self, digest: str, text: str) -> None:
        if digest in self._items:
            self._items.move_to_end(digest)
            return
        self._items[digest] = text
        self._bytes += len(text.encode("utf-8"))
        while self._bytes > self.max_bytes and len(self._items) > 1:
            _, old = self._items.popitem(last=False)
            self._bytes -= len(old.encode("utf-8"))

    def retain(self, digests: Iterable[str]) -> int:
        """Drop every body not in ``digests``; returns how many were dropped."""
        keep = set(digests)
        drop = [d for d in self._items if d not in keep]
        for digest in drop:
            self._bytes -= len(self._items.pop(digest).encode("utf-8"))
        return len(drop)

    def __contains__(self, digest: str) -> bool:
        return digest in self._items

    def __len__(self) -> int:
        return len(self._items)


# -- one MCP server -------------------------------------------------------------------------


def _dump(result: Any) -> dict[str, Any]:
    """An MCP result as wire-shaped JSON (camelCase), the same across SDK versions."""
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


def _classify_resource(res: Mapping[str, Any]) -> str | None:
    """The skill name a listed resource stands for, or None if it is not a skill."""
    uri = str(res.get("uri", ""))
    mime = str(res.get("mimeType") or "")
    if uri.startswith(SKILL_SCHEME):
        rest = uri[len(SKILL_SCHEME) :].rstrip("/")
        if not rest:
            return None  # the index
        if "/" not in rest:
            return rest
        head, _, tail = rest.partition("/")
        if tail == "SKILL.md" and mime in SKILL_MD_MIMES:
            return head
        return None  # a supporting file under a skill
    if mime == SKILL_MIME:
        return str(res.get("name") or "") or None
    return None


def _text_of_prompt(result: Mapping[str, Any]) -> str:
    parts: list[str] = []
    for message in result.get("messages", []):
        content = message.get("content") or {}
        blocks = content if isinstance(content, list) else [content]
        for block in blocks:
            if block.get("type") == "text" and block.get("text"):
                parts.append(block["text"])
            elif block.get("type") == "resource" and (block.get("resource") or {}).get("text"):
                parts.append(block["resource"]["text"])
    return "\n\n".join(parts)


def _text_of_resource(result: Mapping[str, Any]) -> str:
    return "\n\n".join(c["text"] for c in result.get("contents", []) if c.get("text"))


class ServerLink:
    """The long-lived session with one MCP server and what it last offered."""

    def __init__(
        self,
        spec: McpServerSpec,
        config: SkillsConfig,
        on_update: Callable[[ServerLink], None],
        on_body: Callable[[str, str], Any],
    ) -> None:
        self.spec = spec
        self.config = config
        self.entries: list[SkillInfo] = []
        self.ready = False
        self.last_error = ""
        self._on_update = on_update
        self._on_body = on_body
        self._session: Any = None
        self._task: asyncio.Task[None] | None = None
        self._has_prompts = False
        self._has_resources = False
        self._wake = asyncio.Event()
        self._waiters: list[asyncio.Future[None]] = []
        self._suspect = False
        #: Names whose bodies were fetched: refreshed with the catalogue so
        #: their current hash stays known.
        self.tracked: set[str] = set()

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"skills-{self.spec.name}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        self._settle_waiters()

    def poke(self) -> asyncio.Future[None]:
        """Ask for a refresh (or a reconnect now); resolves when that attempt ends."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._wake.set()
        return waiter

    def _take_waiters(self) -> list[asyncio.Future[None]]:
        """The refresh requests the attempt about to start answers."""
        waiters, self._waiters = self._waiters, []
        if waiters and not self._suspect:
            self._wake.clear()  # this attempt answers them
        return waiters

    @staticmethod
    def _settle(waiters: list[asyncio.Future[None]]) -> None:
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _settle_waiters(self) -> None:
        self._settle(self._take_waiters())

    async def _run(self) -> None:
        backoff = INITIAL_BACKOFF
        while True:
            batch = self._take_waiters()
            try:
                async with contextlib.AsyncExitStack() as stack:
                    await self._connect(stack)
                    await self._discover()
                    self._settle(batch)
                    backoff = INITIAL_BACKOFF
                    while True:
                        await self._idle(self.config.refresh_interval or None)
                        batch = self._take_waiters()
                        if self._suspect:
                            await self._call(self._session.send_ping(), report=False)
                        await self._discover()
                        self._settle(batch)
            except asyncio.CancelledError:
                self._set_down("stopped")
                self._settle(batch)
                raise
            except Exception as exc:  # noqa: BLE001 - any failure means "reconnect"
                was = (self.ready, self.last_error)
                self._set_down(_describe_error(exc))
                # Warn on a change; a server that stays down is retried quietly.
                level = logging.WARNING if was != (False, self.last_error) else logging.DEBUG
                log.log(
                    level,
                    "skills server unavailable",
                    extra={
                        "server": self.spec.name,
                        "target": self.spec.describe(),
                        "error": self.last_error,
                        "retry_in": backoff,
                    },
                )
            self._settle(batch)
            await self._idle(backoff)
            backoff = min(backoff * 2, self.config.max_backoff)

    async def _idle(self, seconds: float | None) -> None:
        """Wait ``seconds`` (None: until woken), or less when poked or a call failed."""
        if not self._wake.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(seconds):
                    await self._wake.wait()
        self._wake.clear()

    async def _connect(self, stack: contextlib.AsyncExitStack) -> None:
        import anyio
        from mcp import ClientSession

        if self.spec.url:
            try:
                from mcp.client.streamable_http import streamable_http_client as http_client
            except ImportError:  # mcp 1.x
                from mcp.client.streamable_http import streamablehttp_client as http_client
            streams = await stack.enter_async_context(http_client(self.spec.url))
        else:
            from mcp import StdioServerParameters, stdio_client

            params = StdioServerParameters(
                command=self.spec.command[0], args=list(self.spec.command[1:])
            )
            streams = await stack.enter_async_context(stdio_client(params, errlog=sys.stderr))
        session = await stack.enter_async_context(ClientSession(streams[0], streams[1]))
        with anyio.fail_after(self.config.connect_timeout):
            result = await session.initialize()
        caps = _dump(result).get("capabilities", {})
        self._has_prompts = "prompts" in caps
        self._has_resources = "resources" in caps
        self._session = session
        self._suspect = False

    def _set_down(self, error: str) -> None:
        self._session = None
        self.last_error = error
        if self.ready:
            self.ready = False
            self._on_update(self)

    # -- calls ----------------------------------------------------------------------------
    async def _call(
        self, awaitable: Awaitable[Any], timeout: float | None = None, *, report: bool = True
    ) -> Any:
        """Await one MCP call within the call timeout. With ``report``, a failure
        marks the session suspect and wakes the owner task to check it."""
        import anyio

        try:
            with anyio.fail_after(timeout or self.config.call_timeout):
                return await awaitable
        except Exception:
            if report:
                self._suspect = True
                self._wake.set()
            raise

    async def _list(self, method: Callable[..., Awaitable[Any]], key: str) -> list[dict[str, Any]]:
        from mcp import types

        items: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            if cursor is None:
                page = _dump(await self._call(method(), report=False))
            else:
                params = types.PaginatedRequestParams(cursor=cursor)
                page = _dump(await self._call(method(params=params), report=False))
            items.extend(page.get(key, []))
            cursor = page.get("nextCursor")
            if not cursor:
                break
        return items

    async def _discover(self) -> None:
        session = self._session
        found: list[SkillInfo] = []
        if self._has_prompts:
            for prompt in await self._list(session.list_prompts, "prompts"):
                if any(a.get("required") for a in prompt.get("arguments") or []):
                    continue
                found.append(
                    self._entry(
                        str(prompt["name"]),
                        prompt.get("description"),
                        "prompt",
                        str(prompt["name"]),
                    )
                )
        if self._has_resources:
            for res in await self._list(session.list_resources, "resources"):
                name = _classify_resource(res)
                if name:
                    found.append(
                        self._entry(name, res.get("description"), "resource", str(res["uri"]))
                    )
        unique: dict[str, SkillInfo] = {}
        for entry in found:
            unique.setdefault(entry.name, entry)
        to_read = [e for e in unique.values() if not e.description or e.name in self.tracked]
        gate = asyncio.Semaphore(DISCOVERY_READS)

        async def read(entry: SkillInfo) -> str:
            # Best effort: a body that cannot be read now leaves the entry as listed.
            async with gate:
                try:
                    return await self._read(entry, report=False)
                except Exception:  # noqa: BLE001
                    return ""

        texts = await asyncio.gather(*(read(e) for e in to_read))
        for entry, text in zip(to_read, texts, strict=True):
            self._on_body(entry.name, text)
            if not entry.description and text:
                unique[entry.name] = self._described(entry, text)
        entries = list(unique.values())
        self.entries = entries
        changed = not self.ready
        self.ready = True
        self.last_error = ""
        self._suspect = False
        self._on_update(self)
        if changed:
            log.info(
                "skills server connected", extra={"server": self.spec.name, "skills": len(entries)}
            )

    def _entry(self, name: str, description: str | None, kind: str, locator: str) -> SkillInfo:
        desc, when = split_description(description)
        return SkillInfo(name, desc, when, self.spec.name, kind, locator)

    @staticmethod
    def _described(entry: SkillInfo, text: str) -> SkillInfo:
        """``entry`` with description / when_to_use from the body's front matter."""
        meta = parse_front_matter(text)
        desc, when = split_description(meta.get("description"))
        return SkillInfo(
            name=entry.name,
            description=desc,
            when_to_use=_one_line(meta.get("when_to_use")) or when,
            server=entry.server,
            kind=entry.kind,
            locator=entry.locator,
        )

    async def _read(self, entry: SkillInfo, timeout: float | None = None, *, report: bool) -> str:
        session = self._session
        if session is None:
            raise Unavailable(f"skill {entry.name!r}: server {self.spec.name!r} is not connected")
        if entry.kind == "prompt":
            result = await self._call(session.get_prompt(entry.locator), timeout, report=report)
            return _text_of_prompt(_dump(result))
        result = await self._call(session.read_resource(entry.locator), timeout, report=report)
        return _text_of_resource(_dump(result))

    async def fetch(self, entry: SkillInfo, timeout: float | None = None) -> str:
        """The raw body of ``entry`` from this server (bounded by the call timeout)."""
        try:
            text = await self._read(entry, timeout, report=True)
        except Unavailable:
            raise
        except TimeoutError:
            raise Unavailable(
                f"skill {entry.name!r}: server {self.spec.name!r} did not answer within "
                f"{timeout or self.config.call_timeout:g}s"
            ) from None
        except Exception as exc:  # noqa: BLE001 - an MCP error, or the session broke
            raise Unavailable(
                f"skill {entry.name!r}: server {self.spec.name!r} failed: {_describe_error(exc)}"
            ) from None
        self.tracked.add(entry.name)
        return text


def _describe_error(exc: BaseException) -> str:
    """A short, path-free description for logs and messages."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe_error(e) for e in exc.exceptions[:3])
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, FileNotFoundError):
        return "command not found"
    if isinstance(exc, OSError):
        return f"cannot start or reach it ({exc.strerror or type(exc).__name__})"
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


# -- the catalogue --------------------------------------------------------------------------


class SkillCatalogue:
    """Every configured server's skills, bodies on demand, and a context's loaded set."""

    def __init__(self, config: SkillsConfig | None = None) -> None:
        self.config = config or SkillsConfig()
        self.bodies = BodyCache(self.config.cache_bytes)
        #: Bumped whenever the entries (not their availability) change.
        self.generation = 0
        self._links = [
            ServerLink(spec, self.config, self._link_updated, self._record)
            for spec in self.config.server_specs()
        ]
        self._entries: dict[str, SkillInfo] = {}
        self._signature: tuple[tuple[str, ...], ...] = ()
        #: name -> hash of the body the server served last time we asked.
        self._current: dict[str, str] = {}
        self._started = False

    # -- lifecycle ------------------------------------------------------------------------
    async def start(self, *, wait: bool = True, timeout: float | None = None) -> None:
        """Connect to every server in the background. With ``wait``, give the first
        attempts up to ``timeout`` (default: connect + 3 call timeouts) to finish,
        so the catalogue is filled when serving starts; servers still down then are
        retried in the background. RuntimeError if servers are configured but the
        ``mcp`` package is missing."""
        if self._started:
            return
        if self._links:
            try:
                import mcp  # noqa: F401
            except ImportError:
                raise RuntimeError(
                    "skills.servers needs the mcp package (pip install 'ctxd[mcp]')"
                ) from None
        self._started = True
        for link in self._links:
            link.start()
        if wait and self._links:
            await self.refresh(timeout)

    async def stop(self) -> None:
        await asyncio.gather(*(link.stop() for link in self._links))
        self._started = False

    async def refresh(self, timeout: float | None = None) -> int:
        """Re-list every server now (reconnecting those that are down) and wait for
        the results, at most ``timeout`` (default: connect + 3 call timeouts).
        Returns the catalogue generation afterwards."""
        if not self._links or not self._started:
            return self.generation
        if timeout is None:
            timeout = self.config.connect_timeout + 3 * self.config.call_timeout
        waiters = [link.poke() for link in self._links]
        await asyncio.wait(waiters, timeout=timeout)
        return self.generation

    # -- catalogue ------------------------------------------------------------------------
    def _link_updated(self, _link: ServerLink) -> None:
        merged: dict[str, SkillInfo] = {}
        # Available servers first, then configuration order, then the link's own order.
        for link in sorted(self._links, key=lambda lk: not lk.ready):
            for entry in link.entries:
                if entry.name not in merged:
                    merged[entry.name] = SkillInfo(
                        entry.name,
                        entry.description,
                        entry.when_to_use,
                        entry.server,
                        entry.kind,
                        entry.locator,
                        available=link.ready,
                    )
        self._entries = dict(sorted(merged.items()))
        signature = tuple(e.signature() for e in self._entries.values())
        if signature != self._signature:
            self._signature = signature
            self.generation += 1
            log.info(
                "skills catalogue changed",
                extra={"generation": self.generation, "skills": len(signature)},
            )

    def _record(self, name: str, raw: str) -> SkillBody | None:
        """Cap, hash and cache a body just read; None when it is empty."""
        text, truncated = cap_body(raw, self.config.max_body_bytes)
        if not text.strip():
            return None
        digest = body_hash(text)
        self._current[name] = digest
        self.bodies.put(digest, text)
        return SkillBody(name=name, text=text, hash=digest, truncated=truncated)

    def entries(self) -> list[SkillInfo]:
        """The catalogue, sorted by name (never blocks)."""
        return list(self._entries.values())

    def get(self, name: str) -> SkillInfo | None:
        return self._entries.get(name)

    def connected(self) -> frozenset[str]:
        """Names of the servers with a live session."""
        return frozenset(link.spec.name for link in self._links if link.ready)

    def servers(self) -> list[dict[str, Any]]:
        """Per-server status, for diagnostics."""
        return [
            {
                "name": link.spec.name,
                "connected": link.ready,
                "skills": len(link.entries),
                "error": link.last_error,
            }
            for link in self._links
        ]

    def _link(self, server: str) -> ServerLink:
        return next(link for link in self._links if link.spec.name == server)

    # -- bodies ---------------------------------------------------------------------------
    async def fetch(self, name: str, *, timeout: float | None = None) -> SkillBody:
        """The current body of ``name`` from its server.

        NotFound if the catalogue has no such skill, Unavailable if its server is
        down or does not answer within the call timeout, FailedPrecondition if
        the body is empty.
        """
        if not isinstance(name, str) or not name:
            raise InvalidArgument("name", "must name a skill")
        entry = self._entries.get(name)
        if entry is None:
            raise NotFound(f"no skill {name!r} in the catalogue (ListSkills shows it)")
        if not entry.available:
            raise Unavailable(f"skill {name!r}: server {entry.server!r} is not connected")
        raw = await self._link(entry.server).fetch(entry, timeout)
        body = self._record(name, raw)
        if body is None:
            raise FailedPrecondition(f"skill {name!r} has an empty body")
        return body

    def current_hash(self, name: str) -> str | None:
        """The hash of the body the server served when last asked (None if never)."""
        return self._current.get(name)

    def stale(self, refs: Iterable[SkillRef]) -> list[str]:
        """Loaded skills whose server now serves a different body (no network)."""
        return [r.name for r in refs if self._current.get(r.name, r.hash) != r.hash]

    async def check(self, refs: Sequence[SkillRef], *, timeout: float | None = None) -> list[str]:
        """Like :meth:`stale`, after asking the servers for the current bodies."""
        await asyncio.gather(*(self._try_fetch(r.name, timeout) for r in refs))
        return self.stale(refs)

    async def _try_fetch(self, name: str, timeout: float | None) -> SkillBody | None:
        try:
            return await self.fetch(name, timeout=timeout)
        except (NotFound, Unavailable, FailedPrecondition):
            return None

    async def resolve(
        self, refs: Sequence[SkillRef], *, timeout: float | None = None
    ) -> list[ResolvedSkill]:
        """Bodies for a context's loaded set: from the cache by hash, else fetched.

        A body whose hash is no longer cached (evicted, or a restart) is fetched
        now; if the server serves a different version, that one is shown and
        ``changed`` is true. A body neither cached nor fetchable has text None.
        """
        missing = [r for r in refs if self.bodies.get(r.hash) is None]
        fetched = dict(
            zip(
                [r.name for r in missing],
                await asyncio.gather(*(self._try_fetch(r.name, timeout) for r in missing)),
                strict=True,
            )
        )
        out: list[ResolvedSkill] = []
        for ref in refs:
            text = self.bodies.get(ref.hash)
            if text is None and fetched.get(ref.name) is not None:
                text = fetched[ref.name].text
            out.append(ResolvedSkill(ref.name, ref.hash, text, self._current.get(ref.name)))
        return out

    # -- a context's loaded set -----------------------------------------------------------
    async def load(
        self, refs: Sequence[SkillRef], name: str, *, timeout: float | None = None
    ) -> LoadResult:
        """Load (or re-load) ``name`` into a loaded set; LimitExceeded past ``max_loaded``."""
        current = list(refs)
        index = next((i for i, r in enumerate(current) if r.name == name), None)
        if index is None:
            self._check_cap(len(current))
        body = await self.fetch(name, timeout=timeout)
        ref = SkillRef(name, body.hash)
        changed = index is not None and current[index].hash != body.hash
        if index is None:
            current.append(ref)
        else:
            current[index] = ref
        return LoadResult(refs=current, ref=ref, truncated=body.truncated, changed=changed)

    def _check_cap(self, count: int) -> None:
        limit = self.config.max_loaded
        if count >= limit:
            raise LimitExceeded(
                "skills.max_loaded",
                limit,
                f"a context loads at most {limit} skills (skills.max_loaded); unload one first",
            )

    @staticmethod
    def unload(refs: Sequence[SkillRef], name: str) -> tuple[list[SkillRef], bool]:
        """The loaded set without ``name``, and whether it was loaded."""
        kept = [r for r in refs if r.name != name]
        return kept, len(kept) != len(refs)

    async def preload(
        self, refs: Sequence[SkillRef], texts: Iterable[str], *, timeout: float | None = None
    ) -> PreloadResult:
        """Load every skill referenced as ``@skill:<name>`` in ``texts``.

        Never fatal: names not in the catalogue are returned as ``unknown``;
        names that cannot be loaded now (server down or slow, the cap reached,
        an empty body) as ``failed`` with the reason. A skill already loaded
        with its current hash is left alone. Fetches run concurrently, so a
        turn waits at most about one call timeout.
        """
        names: list[str] = []
        for text in texts:
            names.extend(n for n in find_references(text) if n not in names)
        current = list(refs)
        unknown = [n for n in names if n not in self._entries]
        failed: dict[str, str] = {}
        wanted: list[str] = []
        slots = self.config.max_loaded - len(current)
        for name in names:
            if name in unknown:
                continue
            held = next((r for r in current if r.name == name), None)
            if held is not None:
                if self._current.get(name) == held.hash and held.hash in self.bodies:
                    continue
            elif slots <= 0:
                failed[name] = (
                    f"skills.max_loaded ({self.config.max_loaded}) reached; unload one first"
                )
                continue
            else:
                slots -= 1
            wanted.append(name)
        results = await asyncio.gather(
            *(self.fetch(n, timeout=timeout) for n in wanted), return_exceptions=True
        )
        loaded: list[SkillRef] = []
        for name, result in zip(wanted, results, strict=True):
            if isinstance(result, BaseException):
                if not isinstance(result, NotFound | Unavailable | FailedPrecondition):
                    raise result
                failed[name] = result.message
                continue
            ref = SkillRef(name, result.hash)
            index = next((i for i, r in enumerate(current) if r.name == name), None)
            if index is None:
                current.append(ref)
                loaded.append(ref)
            elif current[index].hash != ref.hash:
                current[index] = ref
                loaded.append(ref)
        return PreloadResult(refs=current, loaded=loaded, unknown=unknown, failed=failed)
