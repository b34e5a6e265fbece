"""Plugin manager: built-ins first, then entry points, then ``check_pending``."""

from __future__ import annotations

import importlib
import logging
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pluggy

from sidecar import hookspecs
from sidecar.store import Store

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "ctxd.stores"

#: Built-in plugins, registered exactly like third-party ones.
DEFAULT_PLUGINS = (
    "plugins.lmdb_store",
    "plugins.s3_store",
    "plugins.memory_store",
    "plugins.extractive_summariser",
    "plugins.openai_summariser",
)


def plugin_manager() -> pluggy.PluginManager:
    """A plugin manager with every built-in and installed plugin loaded."""
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    for name in DEFAULT_PLUGINS:
        pm.register(importlib.import_module(name), name=name)
    pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
    pm.check_pending()
    _warn_on_shared_schemes(pm)
    return pm


def _warn_on_shared_schemes(pm: pluggy.PluginManager) -> None:
    """Two plugins claiming one scheme is legal (the later-registered one
    answers first, so an installed plugin can replace a built-in) but should
    never happen by accident."""
    owners: dict[str, list[str]] = {}
    for name, plugin in pm.list_name_plugin():
        hook = getattr(plugin, "ctxd_store_schemes", None)
        for scheme in hook() if callable(hook) else ():
            owners.setdefault(scheme, []).append(name)
    for scheme, names in owners.items():
        if len(names) > 1:
            log.warning(
                "store scheme served by several plugins; the last registered answers first",
                extra={"scheme": scheme, "plugins": names},
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


def summarisers(config: Any, pm: pluggy.PluginManager | None = None) -> dict[str, Any]:
    """The summarisers plugins offer for ``config``, by name.

    Plugins are asked in registration order (built-ins first); a name already
    offered is not taken over by a later plugin (a warning is logged).
    """
    pm = pm or plugin_manager()
    out: dict[str, Any] = {}
    # pluggy calls the most recently registered plugin first.
    for offered in reversed(pm.hook.ctxd_summarisers(config=config)):
        for summariser in offered or ():
            name = getattr(summariser, "name", "")
            if not name or not callable(getattr(summariser, "summarise", None)):
                log.warning("ignoring a summariser without name or summarise()")
            elif name in out:
                log.warning("summariser name already taken", extra={"summariser": name})
            else:
                out[name] = summariser
    return out
