"""The one module a ctxd plugin imports from.

Everything a store, summariser or hook plugin needs, in one place (the
built-in plugins in ``plugins/`` use nothing else)::

    from ctxd_sidecar.plugin import Capability, Item, Store, StoreOptions, hookimpl, store_hooks

* hooks: :data:`hookimpl` (the marker; every hook is documented in
  :mod:`ctxd_sidecar.plugin.spec`);
* stores: :class:`Store` (or :class:`AsyncStore` for a store that
  schedules its own writes), :class:`Item`, :class:`Capability` (what a store
  can do), :class:`CallStyle` (how it likes to be called), the errors it
  raises, :func:`check_precondition` and :func:`content_version` for
  backends that compare and set themselves, and :func:`store_hooks` with
  :class:`StoreOptions` for a store's two hooks and its URI options;
* settings: :class:`ConfigTable` and :class:`Table` for a plugin's own
  configuration table, the number types core settings use, and
  :class:`Config` (what hooks receive);
* summarisers: :class:`Summariser`, :class:`SummaryRequest` and
  :class:`MessageView` (what a summariser is asked), :class:`Summary` (what
  it answers), the answer schema and parser the built-in model summariser
  uses, and the helpers the built-in extractive one uses (:func:`clip`,
  :func:`clean_item`, :func:`compact_json`, :func:`content_words`,
  :func:`redundant`, :func:`text_artifacts`);
* errors a plugin may raise for the sidecar to answer with:
  :class:`Unavailable`, :class:`SummariserError`, :class:`MalformedAnswer`.

Conformance tests for a store: :mod:`ctxd_sidecar.testing.store_conformance`,
with :func:`open_store` to open the store under test by its URI through the
installed plugins, as ``ctxd serve`` does (the entry point and hooks are
then tested too).
"""

from __future__ import annotations

from ctxd_sidecar.config import (
    Config,
    ConfigTable,
    NonNegative,
    Positive,
    PositiveFloat,
    Table,
)
from ctxd_sidecar.core.compaction import (
    ANSWER_SCHEMA,
    DEFAULT_CAP,
    MalformedAnswer,
    MessageView,
    Summariser,
    SummariserError,
    Summary,
    SummaryRequest,
    ToolCallView,
    clip,
    parse_answer,
)
from ctxd_sidecar.core.compaction.excerpt import compact_json
from ctxd_sidecar.core.compaction.ledger_scan import text_artifacts
from ctxd_sidecar.core.compaction.summary import clean_item, content_words, redundant
from ctxd_sidecar.core.errors import Unavailable
from ctxd_sidecar.plugin.manager import open_store
from ctxd_sidecar.plugin.spec import hookimpl
from ctxd_sidecar.plugin.store import (
    AsyncStore,
    CallStyle,
    Capability,
    Item,
    PreconditionFailed,
    Store,
    StoreError,
    StoreFull,
    StoreUnavailable,
    Write,
    check_precondition,
    content_version,
)
from ctxd_sidecar.plugin.storehooks import StoreHooks, StoreOptions, parse_options, store_hooks

__all__ = [
    "ANSWER_SCHEMA",
    "DEFAULT_CAP",
    "AsyncStore",
    "CallStyle",
    "Capability",
    "Config",
    "ConfigTable",
    "Item",
    "MalformedAnswer",
    "MessageView",
    "NonNegative",
    "Positive",
    "PositiveFloat",
    "PreconditionFailed",
    "Store",
    "StoreError",
    "StoreFull",
    "StoreHooks",
    "StoreOptions",
    "StoreUnavailable",
    "Summariser",
    "SummariserError",
    "Summary",
    "SummaryRequest",
    "Table",
    "ToolCallView",
    "Unavailable",
    "Write",
    "check_precondition",
    "clean_item",
    "clip",
    "compact_json",
    "content_words",
    "content_version",
    "hookimpl",
    "open_store",
    "parse_answer",
    "parse_options",
    "redundant",
    "store_hooks",
    "text_artifacts",
]
