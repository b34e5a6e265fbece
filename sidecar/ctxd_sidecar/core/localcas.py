"""Compare-and-set for stores without CONDITIONAL_PUT.

Such a store is safe for one sidecar only: :class:`~.storage.Storage` checks
a write's precondition and applies the write under an in-process lock,
which other processes cannot see (a store declaring SHARED declares
CONDITIONAL_PUT too, as the conformance suite checks).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from ctxd_sidecar.core.errors import Conflict
from ctxd_sidecar.plugin.store import Item, PreconditionFailed, check_precondition

CHANGED = "the record changed since it was read; re-read and retry"


class LocalCas:
    """Striped locks over keys, and the precondition checked under them."""

    def __init__(self, get: Callable[[str], Awaitable[Item | None]], stripes: int = 64) -> None:
        #: Reads a full key's current item (None: absent, tombstones included).
        self._get = get
        self._locks = [asyncio.Lock() for _ in range(stripes)]

    @contextlib.asynccontextmanager
    async def checked(
        self, full: str, if_version: str | None, if_absent: bool
    ) -> AsyncIterator[None]:
        """Hold ``full``'s lock with its precondition checked, while the
        write under it runs; :class:`Conflict` when it does not hold."""
        async with self._locks[hash(full) % len(self._locks)]:
            if if_version is not None or if_absent:
                current = await self._get(full)
                try:
                    check_precondition(current, if_version, if_absent)
                except PreconditionFailed:
                    exists = if_absent and current is not None
                    raise Conflict("the record already exists" if exists else CHANGED) from None
            yield
