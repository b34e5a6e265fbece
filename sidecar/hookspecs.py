"""Hook specifications for ctxd plugins (pluggy project name ``ctxd``).

A plugin is a module or object with functions marked ``@hookimpl`` and
registered through the ``ctxd.stores`` entry-point group, e.g.::

    [project.entry-points."ctxd.stores"]
    redis = "ctxd_redis"

Built-in plugins are registered through the same plugin manager path
(see :mod:`sidecar.plugins`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from sidecar.store import Store

PROJECT = "ctxd"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def ctxd_store_schemes() -> list[str]:
    """Return the URI schemes this plugin can open (e.g. ``["lmdb"]``).

    Called on every plugin; the results are listed in ``ctxd plugins`` and in
    the error for an unknown scheme.
    """


@hookspec(firstresult=True)
def ctxd_open_store(scheme: str, uri: str, options: Mapping[str, str]) -> Store | None:
    """Open the store for ``uri`` if this plugin serves ``scheme``.

    :param scheme: the lower-cased URI scheme (``"s3"``).
    :param uri: the full store URI as configured (may carry credentials in
        its query; never log it).
    :param options: the URI's query parameters, decoded.
    :return: a :class:`sidecar.store.Store`, or ``None`` to let another
        plugin answer. The first non-``None`` result wins (``firstresult``).
    :raise ValueError: the URI is for this plugin but malformed; the message
        is shown to the operator.
    """


@hookspec
def ctxd_summarisers(config: Any) -> list[Any]:
    """Return the summarisers this plugin offers for compaction (may be empty).

    :param config: the sidecar's :class:`sidecar.config.Config`; a plugin
        reads its settings from it (e.g. ``config.compaction``).
    :return: objects with ``name``, ``window_tokens`` (``int`` or ``None``),
        ``max_output_tokens`` and ``async summarise(request) -> Summary | str``,
        optionally ``uses_excerpt`` and ``async aclose()``; the contract is
        :class:`sidecar.core.compaction.Summariser`. Raise ``ValueError`` with
        an operator-facing message for a bad setting.

    Called once at start-up on every plugin (see
    :func:`sidecar.plugins.summarisers`); built-ins come first and a later
    plugin does not take over a name already offered.
    """
