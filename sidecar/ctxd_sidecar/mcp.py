"""The one MCP client: sessions with MCP servers, for skills and for memory.

An MCP session is bound to the task that opened it (its streams live in anyio
task groups), so :class:`McpSession` opens each session in a background task
of its own and keeps it there until :meth:`McpSession.close`; any task may
call through it meanwhile. On top of it:

* :class:`OnDemandConnection` opens a session on first use and again on the
  next call after it broke (memory: a request may wait for the server to start);
* :class:`SessionKeeper` keeps a session open from a background task,
  reconnecting with exponential back-off and refreshing on an interval (skills:
  a request never waits for a connection).

The ``mcp`` SDK is imported only when a session is opened, so a sidecar
without MCP servers never loads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shlex
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

#: First reconnect delay of a :class:`SessionKeeper`; doubles up to its ``max_backoff``.
INITIAL_BACKOFF = 0.5
#: Seconds :meth:`McpSession.close` waits for the session to end before cancelling it.
CLOSE_TIMEOUT = 10.0
#: Most pages read from one paginated list call.
MAX_PAGES = 50


@dataclass(frozen=True, slots=True)
class McpTarget:
    """Where a server is: a stdio command line (started as a child) or an http(s) URL."""

    command: tuple[str, ...] = ()
    url: str = ""

    @classmethod
    def parse(cls, line: str) -> McpTarget:
        """An ``http(s)://`` URL, or else a shell-style command line (ValueError if empty)."""
        line = line.strip()
        if line.startswith(("http://", "https://")):
            return cls(url=line)
        command = tuple(shlex.split(line))
        if not command:
            raise ValueError("an MCP server must be a command line or an http(s) URL")
        return cls(command=command)

    @property
    def is_http(self) -> bool:
        return bool(self.url)

    def transport(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """The SDK client transport for this target (yields the read and write streams)."""
        if self.url:
            try:
                from mcp.client.streamable_http import streamable_http_client as http_client
            except ImportError:  # mcp 1.x
                from mcp.client.streamable_http import streamablehttp_client as http_client
            return http_client(self.url)
        from mcp import StdioServerParameters, stdio_client

        params = StdioServerParameters(command=self.command[0], args=list(self.command[1:]))
        return stdio_client(params, errlog=sys.stderr)


def dump(result: Any) -> dict[str, Any]:
    """An MCP result as wire-shaped JSON (camelCase), the same across SDK versions."""
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


def describe_error(exc: BaseException) -> str:
    """A short, path-free description for logs and messages."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe_error(e) for e in exc.exceptions[:3])
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, FileNotFoundError):
        return "command not found"
    if isinstance(exc, OSError):
        return f"cannot start or reach it ({exc.strerror or type(exc).__name__})"
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


def error_kind(exc: BaseException) -> str:
    """The type name of ``exc`` (of its first member, for a group): no message, no paths."""
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return error_kind(exc.exceptions[0])
    return type(exc).__name__


def _deadline(seconds: float) -> contextlib.AbstractContextManager[Any]:
    """An anyio deadline (TimeoutError when it passes): the SDK's calls run on anyio."""
    import anyio

    return anyio.fail_after(seconds)


class SessionLost(ConnectionError):
    """The server ended the session (it exited or closed the stream)."""


class McpSession:
    """One initialised session, held open by a background task until closed."""

    def __init__(self, target: McpTarget, *, label: str) -> None:
        self.target = target
        self.label = label
        #: ``initialize``'s result, wire-shaped (``capabilities``, ``serverInfo``...).
        self.initialized: dict[str, Any] = {}
        #: Why the session ended when nobody closed it (None while it is open).
        self.failure: BaseException | None = None
        self._session: Any = None
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[None] | None = None
        self._closing = asyncio.Event()
        self._on_lost: Callable[[], None] | None = None

    @classmethod
    async def open(
        cls,
        target: McpTarget,
        *,
        timeout: float,
        label: str,
        on_lost: Callable[[], None] | None = None,
    ) -> McpSession:
        """Start the server (or reach it) and initialise a session within ``timeout``.

        Raises TimeoutError, or whatever starting or initialising raised (an
        ExceptionGroup from the SDK's task groups, FileNotFoundError...).
        ``on_lost`` is called if the session later ends without :meth:`close`.
        """
        session = cls(target, label=label)
        session._on_lost = on_lost
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        session._ready = ready
        session._task = asyncio.create_task(session._hold(ready), name=f"mcp-{label}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), timeout)
        except BaseException:
            await session._abort()
            raise
        return session

    @property
    def capabilities(self) -> dict[str, Any]:
        return self.initialized.get("capabilities", {})

    @property
    def lost(self) -> bool:
        """True once the session ended without being closed."""
        return self._task is not None and self._task.done() and not self._closing.is_set()

    def raise_if_lost(self) -> None:
        if self.lost:
            raise self.failure or SessionLost("the MCP server ended the session")

    async def _hold(self, ready: asyncio.Future[None]) -> None:
        """Own the session for its whole life (MCP sessions are task-bound)."""
        from mcp import ClientSession

        try:
            async with (
                self.target.transport() as streams,
                ClientSession(streams[0], streams[1]) as session,
            ):
                self.initialized = dump(await session.initialize())
                self._session = session
                ready.set_result(None)
                await self._closing.wait()
        except BaseException as exc:  # noqa: BLE001 - surfaced through `ready` or recorded
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else SessionLost("cancelled"))
            elif not self._closing.is_set():
                self.failure = exc
                log.warning(
                    "MCP server connection lost",
                    extra={"server": self.label, "error": error_kind(exc)},
                )
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            opened = self._session is not None
            self._session = None
            if not ready.done():
                ready.set_exception(SessionLost("the MCP server ended the session"))
            elif opened and not self._closing.is_set() and self._on_lost is not None:
                self._on_lost()

    async def _abort(self) -> None:
        task = self._task
        if task is not None and not task.done():
            self._closing.set()
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        ready = self._ready
        if ready is not None and ready.done() and not ready.cancelled():
            ready.exception()  # retrieved: the caller already has the real error

    async def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """End the session (stops a stdio server); cancels it if that takes too long."""
        task = self._task
        if task is None:
            return
        self._closing.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout)
        except (TimeoutError, Exception):  # noqa: BLE001 - shutting down anyway
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    # -- calls ----------------------------------------------------------------------------
    def _live(self) -> Any:
        session = self._session
        if session is None:
            raise SessionLost("the MCP session is closed")
        return session

    async def call_tool(self, name: str, arguments: dict[str, Any], timeout: float) -> Any:
        """The SDK's ``CallToolResult`` of one tool call (TimeoutError past ``timeout``)."""
        with _deadline(timeout):
            return await self._live().call_tool(name, arguments)

    async def get_prompt(self, name: str, timeout: float) -> dict[str, Any]:
        with _deadline(timeout):
            return dump(await self._live().get_prompt(name))

    async def read_resource(self, uri: str, timeout: float) -> dict[str, Any]:
        with _deadline(timeout):
            return dump(await self._live().read_resource(uri))

    async def ping(self, timeout: float) -> None:
        with _deadline(timeout):
            await self._live().send_ping()

    async def list_all(self, kind: str, timeout: float) -> list[dict[str, Any]]:
        """Every ``prompts`` or ``resources`` entry, following cursors (``timeout`` per page)."""
        from mcp import types

        method = self._live().list_prompts if kind == "prompts" else self._live().list_resources
        items: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            with _deadline(timeout):
                if cursor is None:
                    page = dump(await method())
                else:
                    page = dump(await method(params=types.PaginatedRequestParams(cursor=cursor)))
            items.extend(page.get(kind, []))
            cursor = page.get("nextCursor")
            if not cursor:
                break
        return items


class OnDemandConnection:
    """A session opened when first needed and reopened by the next call after it broke."""

    def __init__(
        self,
        target: McpTarget,
        *,
        label: str,
        start_timeout: float,
        on_open: Callable[[McpSession], None] | None = None,
    ) -> None:
        self.target = target
        self.label = label
        #: Seconds a server gets to start and answer ``initialize``.
        self.start_timeout = start_timeout
        self._on_open = on_open
        self._session: McpSession | None = None
        self._lock = asyncio.Lock()

    async def session(self) -> McpSession:
        """The open session, opening one first if there is none (or it was lost)."""
        session = self._session
        if session is not None and not session.lost:
            return session
        async with self._lock:
            session = self._session
            if session is None or session.lost:
                self._session = None
                session = await McpSession.open(
                    self.target, timeout=self.start_timeout, label=self.label
                )
                self._session = session
                if self._on_open is not None:
                    self._on_open(session)
            return session

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()


@dataclass(frozen=True, slots=True)
class KeepPolicy:
    """How a :class:`SessionKeeper` paces itself (all in seconds)."""

    #: Starting the server and ``initialize``.
    connect_timeout: float
    #: One call (a ping, one page of a listing).
    call_timeout: float
    #: Between refreshes; 0: only when poked.
    refresh_interval: float = 0.0
    #: Longest wait between reconnect attempts.
    max_backoff: float = 30.0


class SessionKeeper:
    """A session kept open by a background task.

    The task connects (bounded by the policy's ``connect_timeout``), calls
    ``on_session``, then every ``refresh_interval`` calls it again; a call
    that failed (:meth:`suspect`) makes it ping the server first. On any
    failure it closes the session, reports ``on_down(error, retry_in)`` and
    reconnects after an exponential back-off up to ``max_backoff``; on stop it
    reports ``on_down("stopped", None)``.
    """

    def __init__(
        self,
        target: McpTarget,
        *,
        label: str,
        policy: KeepPolicy,
        on_session: Callable[[McpSession], Awaitable[None]],
        on_down: Callable[[str, float | None], None],
    ) -> None:
        self.target = target
        self.label = label
        self.policy = policy
        #: The open session (None while connecting or down).
        self.session: McpSession | None = None
        self._on_session = on_session
        self._on_down = on_down
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._waiters: list[asyncio.Future[None]] = []
        self._suspect = False

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"mcp-keep-{self.label}")

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

    def suspect(self) -> None:
        """A call failed: have the task check the session now."""
        self._suspect = True
        self._wake.set()

    def healthy(self) -> None:
        """The session answered: no check needed."""
        self._suspect = False

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
                session = await McpSession.open(
                    self.target,
                    timeout=self.policy.connect_timeout,
                    label=self.label,
                    on_lost=self._wake.set,
                )
                try:
                    self.session = session
                    self._suspect = False
                    await self._on_session(session)
                    self._settle(batch)
                    backoff = INITIAL_BACKOFF
                    while True:
                        await self._idle(self.policy.refresh_interval or None)
                        batch = self._take_waiters()
                        session.raise_if_lost()
                        if self._suspect:
                            await session.ping(self.policy.call_timeout)
                        await self._on_session(session)
                        self._settle(batch)
                finally:
                    self.session = None
                    await session.close()
            except asyncio.CancelledError:
                self._on_down("stopped", None)
                self._settle(batch)
                raise
            except Exception as exc:  # noqa: BLE001 - any failure means "reconnect"
                self._on_down(describe_error(exc), backoff)
            self._settle(batch)
            await self._idle(backoff)
            backoff = min(backoff * 2, self.policy.max_backoff)

    async def _idle(self, seconds: float | None) -> None:
        """Wait ``seconds`` (None: until woken), or less when poked or a call failed."""
        if not self._wake.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(seconds):
                    await self._wake.wait()
        self._wake.clear()
