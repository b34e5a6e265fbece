"""ctxd store plugin: ``dir://PATH`` keeps one file per key under PATH.

ctxd finds this module through the ``ctxd.plugins`` entry point (see
pyproject.toml) and calls the two hook implementations that
:func:`ctxd_sidecar.plugin.store_hooks` makes from :func:`open_dir`.
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

from ctxd_dirstore.store import DirStore
from ctxd_sidecar.plugin import StoreOptions, store_hooks

__all__ = ["DirOptions", "DirStore", "ctxd_open_store", "ctxd_store_schemes", "open_dir"]


class DirOptions(StoreOptions):
    """The URI query options (``dir://PATH?locking=false``); ctxd refuses any
    other, or a value of the wrong type, in one line before ``open_dir`` runs."""

    #: Compare-and-set under a file lock (CONDITIONAL_PUT); off for
    #: filesystems without working flock.
    locking: bool = True


def open_dir(uri: str, options: DirOptions) -> DirStore:
    """Open ``dir://PATH[?locking=false]``."""
    parts = urlsplit(uri)
    path = unquote(parts.netloc + parts.path)
    if not path:
        # ValueError messages are shown to the operator as they are.
        raise ValueError("dir store URI needs a path, e.g. dir:///var/lib/ctxd")
    return DirStore(path, locking=options.locking)


# Serves "dir" (shown by ``ctxd plugins``); other schemes are left to other plugins.
ctxd_store_schemes, ctxd_open_store = store_hooks("dir", open_dir, DirOptions)
