"""Hook specifications for ctxd plugins (pluggy project name ``ctxd``).

A plugin is a module or object with functions marked ``@hookimpl``. An
installed package names it in the ``ctxd.plugins`` entry-point group (any
kind of plugin; ctxd's own built-ins are declared there the same way)::

    [project.entry-points."ctxd.plugins"]
    redis = "ctxd_redis"

Order and precedence (one rule for every hook, see :mod:`ctxd_sidecar.plugin.manager`):
the built-ins register first, then every other ``ctxd.plugins`` entry. A
later-registered plugin overrides what an earlier one offers under the same
store scheme, summariser name or config table, and ctxd logs a warning
naming both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from ctxd_sidecar.config import Config, ConfigTable
    from ctxd_sidecar.core.compaction import MessageView, Summariser
    from ctxd_sidecar.core.contexts.archive import CompactionInfo
    from ctxd_sidecar.core.memory.embed import Embedder
    from ctxd_sidecar.plugin.store import Store

PROJECT = "ctxd"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def ctxd_config_tables() -> Sequence[ConfigTable]:
    """Declare this plugin's own configuration tables.

    Each :class:`ctxd_sidecar.config.ConfigTable` names a table and the pydantic
    model that validates it (every field with a default); the loader reads it
    from the TOML file, ``CTXD_<TABLE>_<KEY>`` and ``--set table.key=value``
    like a core table, and the plugin reads it back in later hooks with
    ``config.table(name, Model)``. A bad value stops start-up with one line
    naming the setting.
    """


@hookspec
def ctxd_check_config(config: Config) -> None:
    """Check settings that no single table can judge alone.

    Called after validation with the effective config. Raise ``ValueError``
    whose message names the settings at fault; start-up stops with it.
    """


@hookspec
def ctxd_store_schemes() -> Sequence[str]:
    """Return the URI schemes this plugin can open (e.g. ``["lmdb"]``).

    Listed by ``ctxd plugins`` and in the error for an unknown scheme.
    """


@hookspec(firstresult=True)
def ctxd_open_store(scheme: str, uri: str, options: Mapping[str, str]) -> Store | None:
    """Open the store for ``uri`` if this plugin serves ``scheme``.

    :param scheme: the lower-cased URI scheme (``"s3"``).
    :param uri: the full store URI as configured (may carry credentials in
        its query; never log it).
    :param options: the URI's query parameters, decoded.
    :return: a :class:`ctxd_sidecar.plugin.store.Store`, or ``None`` to let another
        plugin answer. The newest-registered plugin is asked first and the
        first non-``None`` result wins, so an installed plugin may take over
        a built-in scheme.
    :raise ValueError: the URI is for this plugin but malformed; the message
        is shown to the operator.
    """


@hookspec
def ctxd_summarisers(config: Config) -> Sequence[Summariser]:
    """Return the summarisers this plugin offers for compaction (may be empty).

    :param config: the effective configuration; read your own table with
        ``config.table(name, Model)`` (see :func:`ctxd_config_tables`).
    :return: objects satisfying :class:`ctxd_sidecar.core.compaction.Summariser`.
        Raise ``ValueError`` with an operator-facing message for a bad setting.

    Called once at start-up on every plugin (see
    :func:`ctxd_sidecar.plugin.manager.summarisers`); a later-registered plugin that
    offers a name already taken overrides it, with a warning.
    """


@hookspec
def ctxd_embedders(config: Config) -> Sequence[Embedder]:
    """Return the embedders this plugin offers for memory search (may be empty).

    :param config: the effective configuration (read your table with
        ``config.table(name, Model)``).
    :return: objects satisfying :class:`ctxd_sidecar.core.memory.embed.Embedder`
        (a ``name`` and ``async embed(texts) -> list[list[float]]``). Raise
        ``ValueError`` with an operator-facing message for a bad setting.

    ``memory.embedder`` names the one used. Called once at start-up; a
    later-registered plugin offering a taken name overrides it, with a warning.
    """


@hookspec
def ctxd_redact(context_id: str, text: str) -> str | None:
    """Rewrite text before it leaves ctxd for a summariser model.

    Called for every text, tool-call arguments and tool result of the
    messages a compaction folds, before ``Compact`` hands them to a
    summariser plugin and before ``PlanCompaction`` puts them in the excerpt
    for the runtime's model (e.g. mask secrets and credentials in tool
    output). Plugins run in registration order, each seeing the previous
    one's result; return ``None`` to leave the text as it is. The stored
    transcript is never changed. A hook that raises is logged and skipped.
    """


@hookspec
def ctxd_compacted(
    context_id: str, compaction: CompactionInfo, kept: Sequence[MessageView]
) -> str | None:
    """Act after a compaction commits (the second seed's ``on_compacted``).

    :param compaction: what the compaction did (its record).
    :param kept: the messages it kept verbatim, oldest first.
    :return: a note to append to the conversation (e.g. re-anchor the kept
        window with the current task), or ``None``. Each note is appended as
        a ``note`` message, one version after the compaction. A hook that
        raises is logged; the compaction stands either way.
    """
