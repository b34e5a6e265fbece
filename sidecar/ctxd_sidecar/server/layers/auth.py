"""Authentication: a bearer token checked in constant time; health probes pass.

The token comes from ``auth_token`` (fixed) or from ``auth_token_file``,
which :class:`TokenFile` re-reads when it changes, so a rotated token works
without a restart (the clients follow the same file).
"""

from __future__ import annotations

import hmac
import logging
import os
import time
from collections.abc import Callable

import grpc

from ctxd_sidecar.server.layers.pipeline import (
    UNAUTHENTICATED_PREFIXES,
    _is_stream_reply,
    _kind,
    _replace,
)

log = logging.getLogger(__name__)

#: Seconds between checks of the token file (made only while calls arrive).
CHECK_INTERVAL = 1.0


class TokenFile:
    """The tokens currently accepted: the file's, and the ones it held before
    for ``grace`` seconds after it changed.

    A file that becomes empty or unreadable keeps the last good token (one
    warning until it is good again): a half-written or briefly missing file
    during rotation must not lock every caller out.
    """

    def __init__(
        self,
        path: str,
        token: str,
        grace: float,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.grace = grace
        self.clock = clock
        self._current = token.encode()
        self._previous: list[tuple[bytes, float]] = []  # (token, accepted until)
        self._signature = self._stat()
        self._next_check = clock() + CHECK_INTERVAL
        self._warned = False

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def accepted(self) -> list[bytes]:
        now = self.clock()
        if now >= self._next_check:
            self._next_check = now + CHECK_INTERVAL
            signature = self._stat()
            if signature != self._signature or signature is None:
                self._reload(signature, now)
        if self._previous:
            self._previous = [(t, until) for t, until in self._previous if until > now]
        return [self._current, *(t for t, _ in self._previous)]

    def _reload(self, signature: tuple[int, int, int] | None, now: float) -> None:
        try:
            with open(self.path, "rb") as fh:
                token = fh.read().strip()
        except OSError:
            token = b""
        if not token:
            if not self._warned:
                self._warned = True
                log.warning("auth_token_file is empty or unreadable; the last token stays valid")
            return  # checked again next time: the file may be mid-rotation
        self._signature = signature
        if self._warned:
            self._warned = False
            log.info("auth_token_file is readable again")
        if token == self._current:
            return
        if self.grace > 0:
            self._previous.append((self._current, now + self.grace))
        self._previous = [(t, until) for t, until in self._previous if t != token]
        self._current = token
        log.info("auth token changed", extra={"previous_valid_seconds": self.grace})


class Auth:
    """Requires ``authorization: Bearer <token>`` on every call but health, before
    the request is read. The scheme's case does not matter (RFC 9110 §11.1);
    the token comparison is constant-time; the token never appears in logs
    or errors."""

    def __init__(self, token: str | TokenFile) -> None:
        if isinstance(token, TokenFile):
            self._tokens = token.accepted
        else:
            fixed = [token.encode()]
            self._tokens = lambda: fixed

    def _allowed(self, context: grpc.aio.ServicerContext) -> bool:
        presented = b""
        for key, value in context.invocation_metadata() or ():
            if key == "authorization":
                presented = value.encode() if isinstance(value, str) else value
                break
        scheme, _, token = presented.partition(b" ")
        if scheme.lower() != b"bearer":
            return False
        # Every accepted token is compared, so timing tells nothing of which matched.
        ok = False
        for expected in self._tokens():
            ok |= hmac.compare_digest(token, expected)
        return ok

    def wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        if method.startswith(UNAUTHENTICATED_PREFIXES):
            return handler
        return _guarded(
            handler,
            self._allowed,
            grpc.StatusCode.UNAUTHENTICATED,
            "missing or invalid bearer token",
        )


def _guarded(handler, allowed: Callable, code: grpc.StatusCode, message: str):
    """``handler`` refusing with ``code`` whenever ``allowed(context)`` is false."""
    inner = getattr(handler, _kind(handler))
    if _is_stream_reply(inner):

        async def stream(request_or_iterator, context):
            if not allowed(context):
                await context.abort(code, message)
            async for item in inner(request_or_iterator, context):
                yield item

        return _replace(handler, stream)

    async def call(request_or_iterator, context):
        if not allowed(context):
            await context.abort(code, message)
        return await inner(request_or_iterator, context)

    return _replace(handler, call)
