"""Plugin manager and the one precedence rule every hook follows.

Registration order: every module named in the ``ctxd.plugins`` entry-point
group, the built-ins first (``ctxd-sidecar`` declares them in that group like
any third party), then every other distribution's, then ``check_pending()``
(a misspelt hook is an error, not silence).

Precedence: a later-registered plugin overrides an earlier one that offers
the same store scheme, summariser name or config table, so an installed
plugin may replace a built-in; ctxd logs a warning naming both. (pluggy asks
the newest plugin first, which is what makes ``ctxd_open_store`` follow the
rule; the collecting helpers here apply it explicitly.)
"""

from __future__ import annotations

import importlib.metadata
import logging
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

import pluggy

from ctxd_sidecar.plugin import spec
from ctxd_sidecar.plugin.store import Store

if TYPE_CHECKING:
    from ctxd_sidecar.config import Config
    from ctxd_sidecar.core.compaction import Summariser

log = logging.getLogger(__name__)

#: The one entry-point group: every plugin, built-in or installed.
ENTRY_POINT_GROUP = "ctxd.plugins"
#: The distribution whose entry points are the built-ins (registered first,
#: so that an installed plugin may override them).
BUILT_IN_DIST = "ctxd-sidecar"


def plugin_manager() -> pluggy.PluginManager:
    """A plugin manager with every built-in and installed plugin loaded."""
    pm = pluggy.PluginManager(spec.PROJECT)
    pm.add_hookspecs(spec)
    for ep in _entry_points():
        if pm.get_plugin(ep.value) is None and not pm.is_blocked(ep.value):
            pm.register(ep.load(), name=ep.value)
    pm.check_pending()
    _warn_on_shared_schemes(pm)
    return pm


def _entry_points() -> list[importlib.metadata.EntryPoint]:
    """The group's entry points, the built-ins first, each name once."""
    eps = list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
    own = [ep for ep in eps if ep.dist is not None and _canonical(ep.dist.name) == BUILT_IN_DIST]
    if not own:
        raise RuntimeError(
            "ctxd's built-in plugins are not registered: install the package "
            "(pip install -e .) rather than running it from the source tree"
        )
    return own + [ep for ep in eps if ep not in own]


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def each_result(pm: pluggy.PluginManager, hook: str, **kwargs: Any) -> Iterator[tuple[str, Any]]:
    """``(plugin, result)`` of every implementation of ``hook``, oldest
    registration first, so that later results can override earlier ones."""
    for impl in getattr(pm.hook, hook).get_hookimpls():
        if impl.hookwrapper or impl.wrapper:
            continue
        args = {name: kwargs[name] for name in impl.argnames}
        yield plugin_label(impl.plugin, impl.plugin_name), impl.function(**args)


def plugin_label(plugin: object, name: str) -> str:
    """A plugin as an operator knows it: its module, else its registered name."""
    module = getattr(plugin, "__name__", None)
    return module if isinstance(module, str) else name


def scheme_owners(pm: pluggy.PluginManager) -> dict[str, list[str]]:
    """Each store scheme and the plugins claiming it, the one that answers last."""
    owners: dict[str, list[str]] = {}
    for owner, schemes in each_result(pm, "ctxd_store_schemes"):
        for scheme in schemes or ():
            owners.setdefault(scheme, []).append(owner)
    return dict(sorted(owners.items()))


def _warn_on_shared_schemes(pm: pluggy.PluginManager) -> None:
    """Overriding a scheme is allowed (the precedence rule) but should never
    happen by accident."""
    for scheme, owners in scheme_owners(pm).items():
        if len(owners) > 1:
            log.warning(
                "store scheme overridden by a later plugin",
                extra={"scheme": scheme, "plugin": owners[-1], "overrides": owners[:-1]},
            )


def available_schemes(pm: pluggy.PluginManager) -> list[str]:
    return sorted({s for schemes in pm.hook.ctxd_store_schemes() for s in schemes})


def open_store(uri: str, pm: pluggy.PluginManager | None = None) -> Store:
    """Open the store a URI names, through whichever plugin serves its scheme.

    :raise ValueError: unknown scheme or malformed URI (message safe to show).
    """
    pm = pm or plugin_manager()
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if not scheme:
        raise ValueError("store URI needs a scheme, e.g. lmdb:///var/lib/ctxd")
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    store = pm.hook.ctxd_open_store(scheme=scheme, uri=uri, options=options)
    if store is None:
        known = ", ".join(available_schemes(pm)) or "none"
        raise ValueError(f"no store plugin serves scheme {scheme!r} (installed: {known})")
    log.info("store opened", extra={"store": store.describe()})
    return store


def summariser_owners(
    config: Config, pm: pluggy.PluginManager | None = None
) -> dict[str, list[tuple[str, Summariser]]]:
    """Each summariser name and what every plugin offers under it, oldest first."""
    pm = pm or plugin_manager()
    out: dict[str, list[tuple[str, Summariser]]] = {}
    for owner, offered in each_result(pm, "ctxd_summarisers", config=config):
        for summariser in offered or ():
            name = getattr(summariser, "name", "")
            if not name or not callable(getattr(summariser, "summarise", None)):
                log.warning(
                    "ignoring a summariser without name or summarise()", extra={"plugin": owner}
                )
            else:
                out.setdefault(name, []).append((owner, summariser))
    return out


def summarisers(config: Config, pm: pluggy.PluginManager | None = None) -> dict[str, Summariser]:
    """The summarisers plugins offer for ``config``, by name, built-ins first;
    a later plugin offering a taken name overrides it (a warning is logged)."""
    out: dict[str, Summariser] = {}
    for name, offers in summariser_owners(config, pm).items():
        if len(offers) > 1:
            log.warning(
                "summariser overridden by a later plugin",
                extra={
                    "summariser": name,
                    "plugin": offers[-1][0],
                    "overrides": [owner for owner, _ in offers[:-1]],
                },
            )
        out[name] = offers[-1][1]
    return out


def embedder(config: Config, pm: pluggy.PluginManager | None = None):
    """The embedder ``memory.embedder`` names (None when empty); ValueError
    naming the setting when no plugin offers it."""
    name = config.memory.embedder
    if not name:
        return None
    pm = pm or plugin_manager()
    offered: dict[str, Any] = {}
    for owner, embedders in each_result(pm, "ctxd_embedders", config=config):
        for emb in embedders or ():
            if name == getattr(emb, "name", None) and name in offered:
                log.warning("embedder overridden by a later plugin", extra={"plugin": owner})
            offered[getattr(emb, "name", "")] = emb
    if name not in offered:
        known = ", ".join(sorted(n for n in offered if n)) or "none configured"
        raise ValueError(f"memory.embedder: no embedder named {name!r} (offered: {known})")
    return offered[name]


class PluginHooks:
    """The compaction hooks of every plugin, as the domain calls them
    (:class:`ctxd_sidecar.core.observe.CompactionHooks`). A hook that raises is
    logged and skipped: it never loses a compaction or a turn."""

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self.pm = pm
        self._redactors = [
            (plugin_label(impl.plugin, impl.plugin_name), impl.function)
            for impl in pm.hook.ctxd_redact.get_hookimpls()
        ]

    def redact(self, context_id: str, text: str) -> str:
        for label, fn in self._redactors:
            try:
                out = fn(context_id=context_id, text=text)
            except Exception as exc:  # noqa: BLE001 - a plugin's bug must not stop compaction
                log.warning("redact hook failed", extra={"plugin": label, "error": repr(exc)})
                continue
            if isinstance(out, str):
                text = out
        return text

    def compacted(self, context_id: str, compaction, kept) -> list[str]:
        notes: list[str] = []
        for impl in self.pm.hook.ctxd_compacted.get_hookimpls():
            try:
                out = impl.function(context_id=context_id, compaction=compaction, kept=kept)
            except Exception as exc:  # noqa: BLE001 - the compaction stands
                label = plugin_label(impl.plugin, impl.plugin_name)
                log.warning("compacted hook failed", extra={"plugin": label, "error": repr(exc)})
                continue
            if isinstance(out, str) and out.strip():
                notes.append(out)
        return notes
