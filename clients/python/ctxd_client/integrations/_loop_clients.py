"""One :class:`AsyncClient` per event loop, for the seams that frameworks
call from loops of their own (a ``Runner`` per thread, ``run_sync``)."""

from __future__ import annotations

import asyncio

from ctxd_client.aio import AsyncClient


class LoopClients:
    """``given`` as it is when it is a client; for an address, a client
    opened on each event loop that asks, closed by :meth:`close`."""

    def __init__(self, given: AsyncClient | str) -> None:
        self.given = given
        self._made: dict[int, AsyncClient] = {}

    def get(self) -> AsyncClient:
        if isinstance(self.given, AsyncClient):
            return self.given
        loop = asyncio.get_running_loop()
        found = self._made.get(id(loop))
        if found is None:
            found = self._made[id(loop)] = AsyncClient(self.given)
        return found

    async def close(self) -> None:
        """Close the clients opened here (a client passed in stays open)."""
        made, self._made = list(self._made.values()), {}
        for c in made:
            try:
                await c.close()
            except RuntimeError:  # its event loop is gone (run_sync's)
                pass
