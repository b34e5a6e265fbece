"""ctxd store plugin: ``dir://PATH`` keeps one file per key under PATH.

ctxd finds this module through the ``ctxd.plugins`` entry point (see
pyproject.toml) and calls the two hook implementations that
:func:`ctxd_sidecar.storeplugin.store_hooks` makes from :func:`open_dir`.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import unquote, urlsplit

from ctxd_dirstore.store import DirStore
from ctxd_sidecar.storeplugin import store_hooks

__all__ = ["DirStore", "ctxd_open_store", "ctxd_store_schemes", "open_dir"]

_OPTIONS = {"locking"}


def open_dir(uri: str, options: Mapping[str, str]) -> DirStore:
    """Open ``dir://PATH[?locking=false]``."""
    parts = urlsplit(uri)
    path = unquote(parts.netloc + parts.path)
    if not path:
        # ValueError messages are shown to the operator as they are.
        raise ValueError("dir store URI needs a path, e.g. dir:///var/lib/ctxd")
    unknown = sorted(set(options) - _OPTIONS)
    if unknown:
        raise ValueError(f"dir store: unknown option(s) {', '.join(unknown)}; known: locking")
    locking = options.get("locking", "true").lower()
    if locking not in {"true", "false"}:
        raise ValueError(f"dir store option locking={locking!r} must be true or false")
    return DirStore(path, locking=locking == "true")


# Serves "dir" (shown by ``ctxd plugins``); other schemes are left to other plugins.
ctxd_store_schemes, ctxd_open_store = store_hooks("dir", open_dir)
