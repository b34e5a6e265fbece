"""Plugin manager: built-ins first, then entry points, then ``check_pending``."""

from __future__ import annotations

import importlib
import logging
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
)


def plugin_manager() -> pluggy.PluginManager:
    """A plugin manager with every built-in and installed plugin loaded."""
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    for name in DEFAULT_PLUGINS:
        pm.register(importlib.import_module(name), name=name)
    pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
    pm.check_pending()
    return pm


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
