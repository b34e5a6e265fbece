"""An integration's compaction: losing a race to another compaction is not an error.

The sidecar compacts on its own after a turn (``contexts.auto_compact``, on
by default), and other replicas may compact the same conversation. When one
of them folds the messages first, ``Compact`` and ``ApplyCompaction`` answer
ABORTED (their plan is stale, as the API documents): the conversation was
compacted, which is what was asked. The integration then looks once more on
the new version (usually nothing is left to fold) and takes a second ABORTED
as done, so the user's turn never fails for it. Other errors (a summariser
that fails: FAILED_PRECONDITION) still surface.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ctxd_client.errors import Aborted, NotFound

#: The first attempt and one more on the version that won the race.
ATTEMPTS = 2


async def acompact(
    client: Any,
    context_id: str,
    *,
    keep_last: int,
    summariser: str,
    summarise: Callable[[Any], Awaitable[str]] | None = None,
) -> None:
    """Compact through ``client`` (an AsyncClient): by the sidecar's
    summariser, or by ``summarise(plan) -> answer`` (the runtime's model)."""
    for _ in range(ATTEMPTS):
        try:
            if summarise is None:
                await client.compact(context_id, keep_last=keep_last, summariser=summariser)
                return
            plan = await client.plan_compaction(context_id, keep_last=keep_last)
            if plan.nothing_to_do:
                return
            answer = await summarise(plan)
            await client.apply_compaction(context_id, plan.plan_ref, answer)
            return
        except Aborted:
            continue  # another compaction folded these messages first
        except NotFound:
            return  # deleted meanwhile: nothing to compact


def compact(
    client: Any,
    context_id: str,
    *,
    keep_last: int,
    summariser: str,
    summarise: Callable[[Any], str] | None = None,
) -> None:
    """:func:`acompact` through a sync Client."""
    for _ in range(ATTEMPTS):
        try:
            if summarise is None:
                client.compact(context_id, keep_last=keep_last, summariser=summariser)
                return
            plan = client.plan_compaction(context_id, keep_last=keep_last)
            if plan.nothing_to_do:
                return
            client.apply_compaction(context_id, plan.plan_ref, summarise(plan))
            return
        except Aborted:
            continue
        except NotFound:
            return
