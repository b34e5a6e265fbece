"""The composition root: every part of a running sidecar, built in one place.

:func:`build` goes store → storage view → domain services → summarisers →
skills catalogue, and :func:`servicers` puts the gRPC adapters over them;
:func:`migration` builds what ``ctxd migrate`` runs. This module is where a
new service, store or summariser is wired in (see docs/architecture.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import pluggy

from ctxd_sidecar.config import Config
from ctxd_sidecar.core.contexts.auto import AutoCompaction
from ctxd_sidecar.core.contexts.compaction import Compactor
from ctxd_sidecar.core.contexts.deletion import Deletion
from ctxd_sidecar.core.contexts.events import ContextEvent
from ctxd_sidecar.core.contexts.expiry import Expiry
from ctxd_sidecar.core.contexts.forks import Forks
from ctxd_sidecar.core.contexts.history import History
from ctxd_sidecar.core.contexts.listing import Listing
from ctxd_sidecar.core.contexts.model import NOTE, ContextState, Msg
from ctxd_sidecar.core.contexts.planning import Planning
from ctxd_sidecar.core.contexts.service import ContextService
from ctxd_sidecar.core.contexts.skillset import SkillSet
from ctxd_sidecar.core.contexts.truncation import TranscriptEdits
from ctxd_sidecar.core.contexts.turns import TurnRequest, Turns
from ctxd_sidecar.core.memory import Memory, MemoryBackend, StoreMemory
from ctxd_sidecar.core.migrate import Migration
from ctxd_sidecar.core.observe import StoreObservers
from ctxd_sidecar.core.prompt.assemble import PromptAssembler
from ctxd_sidecar.core.skills import SkillCatalogue
from ctxd_sidecar.core.storage import Storage
from ctxd_sidecar.plugin.manager import PluginHooks, embedder, open_store, summarisers
from ctxd_sidecar.plugin.store import Store, StoreError
from ctxd_sidecar.server import metrics, tracing, wire
from ctxd_sidecar.server.context_servicer import ContextServicer
from ctxd_sidecar.server.memory_servicer import MemoryServicer


@dataclass
class Domain:
    """The domain services of one sidecar, ready to serve."""

    storage: Storage
    contexts: ContextService
    turns: Turns
    listing: Listing
    deletion: Deletion
    expiry: Expiry
    compactor: Compactor
    auto: AutoCompaction
    planning: Planning
    catalogue: SkillCatalogue
    prompts: PromptAssembler
    skillset: SkillSet
    memory: Memory
    edits: TranscriptEdits
    history: History
    forks: Forks
    #: Spans for RPCs and store operations, when ``otlp_endpoint`` is set.
    tracing: tracing.Tracing | None = None

    async def start(self) -> None:
        """Start background work, in dependency order."""
        await self.memory.start()
        await self.contexts.start()
        await self.deletion.start()
        self.expiry.start()
        # Serving never waits for skills servers: they connect in the background.
        await self.catalogue.start(wait=False)
        self.auto.start()

    async def stop(self) -> None:
        """Stop background work in the reverse order, then close the store."""
        self.contexts.feed.close()
        await self.skillset.stop()
        await self.catalogue.stop()
        await self.auto.stop()
        await self.compactor.stop()
        self.expiry.stop()
        self.deletion.stop()
        await self.contexts.stop()
        await self.memory.stop()
        await self.storage.close()
        if self.tracing is not None:
            await asyncio.to_thread(self.tracing.shutdown)


def memory_backend(
    config: Config, storage: Storage, observer: metrics.PrometheusObserver | None = None
) -> MemoryBackend:
    """The store, or an MCP memory server when ``memory.mcp_server`` is set
    (it keeps no counters to observe)."""
    if config.memory.mcp_server:
        from ctxd_sidecar.core.memory.mcp import McpMemory  # the mcp SDK only when used

        return McpMemory(config.memory)
    return StoreMemory(config.memory, storage, observer=observer)


async def build(
    config: Config, pm: pluggy.PluginManager, *, idle: Callable[[], bool] | None = None
) -> Domain:
    """Open the configured store and build every domain service over it.

    ``idle`` says whether nothing but the caller waits for the event loop
    (the server's admission gate): only then may a store write run inline.
    """
    store = await asyncio.to_thread(open_store, config.store, pm)
    traces = tracing.setup(config)
    storage = Storage(
        store,
        prefix=config.prefix,
        instance=config.instance,
        observer=StoreObservers(metrics.PrometheusObserver(), traces),
        **({"idle": idle} if idle is not None else {}),
    )
    observer = metrics.PrometheusObserver()
    contexts = ContextService(
        config.contexts,
        storage,
        archive_ttl=config.compaction.archive_ttl,
        observer=observer,
        framing=wire.ReplyFraming(),
    )
    catalogue = SkillCatalogue(config.skills)
    prompts = PromptAssembler(config.prompt, catalogue)
    skillset = SkillSet(contexts, catalogue, prompts)
    listing = Listing(contexts)
    deletion = Deletion(contexts)
    turns = Turns(contexts, skillset)
    compactor = _compactor(config, pm, contexts, turns, observer)
    memory = memory_backend(config, storage, observer)
    history = History(contexts)
    observe(observer, contexts)
    return Domain(
        storage=storage,
        contexts=contexts,
        turns=turns,
        listing=listing,
        deletion=deletion,
        expiry=Expiry(contexts, listing, deletion),
        compactor=compactor,
        auto=AutoCompaction(compactor, contexts.feed),
        planning=Planning(contexts, config.plan),
        catalogue=catalogue,
        prompts=prompts,
        skillset=skillset,
        memory=Memory(config.memory, memory, embedder(config, pm)),
        edits=TranscriptEdits(contexts, turns),
        history=history,
        forks=Forks(contexts, history),
        tracing=traces,
    )


def _compactor(
    config: Config,
    pm: pluggy.PluginManager,
    contexts: ContextService,
    turns: Turns,
    observer: metrics.PrometheusObserver,
) -> Compactor:
    """The compactor, with the plugins' notes appended as turns of their own."""

    async def append_note(cid: str, text: str) -> None:
        await turns.append(TurnRequest(cid, [Msg(NOTE, text=text)]))

    return Compactor(
        contexts,
        config,
        summarisers(config, pm),
        observer=observer,
        hooks=PluginHooks(pm),
        notes=append_note,
    )


def observe(observer: metrics.PrometheusObserver, contexts: ContextService) -> None:
    """The token estimate after each turn, told to ``observer``."""

    def after(event: ContextEvent, state: ContextState | None) -> None:
        if event.kind == "turn" and state is not None:
            observer.context_tokens(state.est_tokens)

    contexts.feed.add_listener(after)


async def migration(
    config: Config,
    pm: pluggy.PluginManager,
    source: str,
    target: str,
    *,
    overwrite: bool = False,
    dry_run: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> Migration:
    """``ctxd migrate``'s run from ``source`` to ``target`` (the configured
    prefix and instance); ValueError naming the store that cannot be opened.
    The caller closes ``src`` and ``dst`` after it."""
    stores: list[Store] = []
    for role, uri in (("source", source), ("destination", target)):
        try:
            stores.append(await asyncio.to_thread(open_store, uri, pm))
        except StoreError as exc:
            for opened in stores:
                opened.close()
            raise ValueError(f"cannot open the {role} {uri}: {exc}") from None
    src, dst = (Storage(s, prefix=config.prefix, instance=config.instance) for s in stores)
    return Migration(
        src,
        dst,
        overwrite=overwrite,
        idem_cap=config.contexts.idempotency_keys,
        dry_run=dry_run,
        progress=progress,
    )


def servicers(domain: Domain) -> tuple[ContextServicer, MemoryServicer]:
    """The gRPC adapters over ``domain``."""
    contexts = ContextServicer(
        contexts=domain.contexts,
        turns=domain.turns,
        listing=domain.listing,
        deletion=domain.deletion,
        compactor=domain.compactor,
        planning=domain.planning,
        skillset=domain.skillset,
        edits=domain.edits,
        history=domain.history,
        forks=domain.forks,
    )
    return contexts, MemoryServicer(domain.memory)
