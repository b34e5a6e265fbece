"""The skills catalogue: every configured server's skills, bodies on demand,
and the operations on a context's loaded set (load, unload, preload, resolve)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxd_sidecar.config import SkillsConfig
from ctxd_sidecar.core.errors import (
    FailedPrecondition,
    InvalidArgument,
    LimitExceeded,
    NotFound,
    Unavailable,
)
from ctxd_sidecar.core.skills.cache import BodyCache, body_hash, cap_body
from ctxd_sidecar.core.skills.frontmatter import find_references
from ctxd_sidecar.core.skills.link import ServerLink
from ctxd_sidecar.core.skills.model import SkillInfo, SkillRef

log = logging.getLogger(__name__)


# -- results ------------------------------------------------------------------------------


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
                    "skills.servers needs the mcp package (pip install '.[mcp]' from a ctxd clone)"
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
