"""A session forked at an item: ForkContext at the newest kept version whose
items are a prefix of the ones wanted, then the rest of them (a cut inside
one ``add_items`` batch has no version of its own) appended as one turn."""

from __future__ import annotations

from typing import Any

from ctxd_client.aio import AsyncClient
from ctxd_client.errors import AlreadyExists

FORMAT = "openai_responses"


async def _prefix_version(client: AsyncClient, source: str, want: list[Any]) -> tuple[int, int]:
    """(version, items it holds) of the newest kept version holding a prefix
    of ``want``; (0, 0) when none does (the fork then starts empty)."""
    for v in await client.versions(source):  # newest first: a cut near the end reads few
        then = list(await client.slice(source, format=FORMAT, at_version=v.version))
        if then == want[: len(then)]:
            return v.version, len(then)
    return 0, 0


async def fork_at_item(
    client: AsyncClient, source: str, new: str, items: list[Any], at_item: int | None, **turn: Any
) -> None:
    """``new`` holds ``items[:at_item]`` (Python's slice rule: None is all,
    a negative index counts from the end), sharing ``source``'s history."""
    want = items[:at_item]
    version, held = await _prefix_version(client, source, want)
    if version:
        await client.fork(source, new, at_version=version)
    elif not (await client.create_context(new, **turn)).created:
        raise AlreadyExists(f"context {new} already exists: fork to a new session id")
    if want[held:]:
        await client.append_turn(new, want[held:], format=FORMAT, **turn)
