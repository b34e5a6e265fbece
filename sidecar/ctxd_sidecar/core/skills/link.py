"""One MCP server as a source of skills: what it lists, and reading a body.

The session itself (connecting, refreshing, reconnecting with back-off, call
timeouts) is :class:`ctxd_sidecar.mcp.SessionKeeper`'s; this module
turns listings into :class:`SkillInfo` entries and reads bodies through it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from ctxd_sidecar.config import McpServerSpec, SkillsConfig
from ctxd_sidecar.core.errors import Unavailable
from ctxd_sidecar.core.skills.frontmatter import one_line, parse_front_matter, split_description
from ctxd_sidecar.core.skills.model import SkillInfo
from ctxd_sidecar.mcp import (
    KeepPolicy,
    McpSession,
    McpTarget,
    SessionKeeper,
    describe_error,
)

log = logging.getLogger(__name__)

SKILL_MIME = "text/x-skill+markdown"
SKILL_MD_MIMES = frozenset({"text/markdown", SKILL_MIME, ""})
SKILL_SCHEME = "skill://"
#: Bodies read at once during a refresh (entries without a description, tracked skills).
DISCOVERY_READS = 8


def classify_resource(res: Mapping[str, Any]) -> str | None:
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


def text_of_prompt(result: Mapping[str, Any]) -> str:
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


def text_of_resource(result: Mapping[str, Any]) -> str:
    return "\n\n".join(c["text"] for c in result.get("contents", []) if c.get("text"))


class ServerLink:
    """One configured MCP server's skills, kept current over a long-lived session."""

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
        self.keeper = SessionKeeper(
            McpTarget(command=tuple(spec.command), url=spec.url),
            label=f"skills-{spec.name}",
            policy=KeepPolicy(
                config.connect_timeout,
                config.call_timeout,
                config.refresh_interval,
                config.max_backoff,
            ),
            on_session=self._discover,
            on_down=self._set_down,
        )
        #: Names whose bodies were fetched: refreshed with the catalogue so
        #: their current hash stays known.
        self.tracked: set[str] = set()

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        self.keeper.start()

    async def stop(self) -> None:
        await self.keeper.stop()

    def poke(self) -> asyncio.Future[None]:
        """Ask for a refresh (or a reconnect now); resolves when that attempt ends."""
        return self.keeper.poke()

    def _set_down(self, error: str, retry_in: float | None) -> None:
        was = (self.ready, self.last_error)
        self.last_error = error
        if self.ready:
            self.ready = False
            self._on_update(self)
        if retry_in is None:
            return  # stopped
        # Warn on a change; a server that stays down is retried quietly.
        level = logging.WARNING if was != (False, error) else logging.DEBUG
        log.log(
            level,
            "skills server unavailable",
            extra={
                "server": self.spec.name,
                "target": self.spec.describe(),
                "error": error,
                "retry_in": retry_in,
            },
        )

    # -- listing --------------------------------------------------------------------------
    async def _discover(self, session: McpSession) -> None:
        caps = session.capabilities
        timeout = self.config.call_timeout
        found: list[SkillInfo] = []
        if "prompts" in caps:
            for prompt in await session.list_all("prompts", timeout):
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
        if "resources" in caps:
            for res in await session.list_all("resources", timeout):
                name = classify_resource(res)
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
        self.keeper.healthy()
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
            when_to_use=one_line(meta.get("when_to_use")) or when,
            server=entry.server,
            kind=entry.kind,
            locator=entry.locator,
        )

    # -- bodies ---------------------------------------------------------------------------
    async def _read(self, entry: SkillInfo, timeout: float | None = None, *, report: bool) -> str:
        """The body of ``entry``. With ``report``, a failure makes the keeper check
        the session."""
        session = self.keeper.session
        if session is None:
            raise Unavailable(f"skill {entry.name!r}: server {self.spec.name!r} is not connected")
        timeout = timeout or self.config.call_timeout
        try:
            if entry.kind == "prompt":
                return text_of_prompt(await session.get_prompt(entry.locator, timeout))
            return text_of_resource(await session.read_resource(entry.locator, timeout))
        except Exception:
            if report:
                self.keeper.suspect()
            raise

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
                f"skill {entry.name!r}: server {self.spec.name!r} failed: {describe_error(exc)}"
            ) from None
        self.tracked.add(entry.name)
        return text
