"""Prometheus metrics, served on their own port (``metrics_listen``).

Defined in one place so names and labels stay consistent. The domain core
knows nothing of Prometheus: it reports to observers
(:mod:`ctxd_sidecar.core.observe`), and the Prometheus ones live here.
"""

from __future__ import annotations

import threading
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, start_http_server

_LATENCY_BUCKETS = (
    0.0002,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
)

RPC_REQUESTS = Counter(
    "ctxd_rpc_requests_total",
    "RPCs handled, by service, method and status code.",
    ["service", "method", "code"],
)
RPC_LATENCY = Histogram(
    "ctxd_rpc_latency_seconds",
    "RPC handling time, by service, method and status code.",
    ["service", "method", "code"],
    buckets=_LATENCY_BUCKETS,
)
STORE_LATENCY = Histogram(
    "ctxd_store_operation_seconds",
    "Store operation time, by backend and operation.",
    ["backend", "op"],
    buckets=_LATENCY_BUCKETS,
)
STORE_ERRORS = Counter(
    "ctxd_store_errors_total",
    "Store operations that failed, by backend, operation and kind.",
    ["backend", "op", "kind"],
)
CONTEXTS_RESIDENT = Gauge("ctxd_contexts_resident", "Contexts held in the in-memory registry.")
#: One observation per committed turn (no per-context label: that would grow
#: without bound); the buckets span small chats to million-token windows.
CONTEXT_TOKENS = Histogram(
    "ctxd_context_tokens",
    "Estimated tokens of a context after each turn.",
    buckets=(1_000, 4_000, 16_000, 32_000, 64_000, 128_000, 200_000, 400_000, 1_000_000),
)
COMPACTIONS = Counter(
    "ctxd_compactions_total", "Compactions, by trigger and result.", ["trigger", "result"]
)
COMPACTION_FIDELITY = Histogram(
    "ctxd_compaction_fidelity",
    "Share of a folded span's verbatim artifacts still carried after the compaction.",
    ["trigger"],
    buckets=(0.5, 0.8, 0.9, 0.95, 0.98, 0.99, 0.999, 1.0),
)
COMPACTION_DROPPED = Counter(
    "ctxd_compaction_artifacts_dropped_total",
    "Verbatim artifacts of folded spans no longer carried after their compaction, by kind.",
    ["kind"],
)
SUMMARIES_REFUSED = Counter(
    "ctxd_compaction_summaries_refused_total",
    "Compactions declined because the summary was malformed, empty or a placeholder.",
    ["trigger", "reason"],
)
USAGE_INPUT = Counter(
    "ctxd_usage_input_tokens_total",
    "Input tokens of RecordUsage reports that carried prompt-cache counts "
    "(the denominator of the cache-read share).",
)
USAGE_CACHED = Counter(
    "ctxd_usage_cached_input_tokens_total",
    "Input tokens the provider read from its prompt cache (RecordUsage).",
)
USAGE_CACHE_WRITES = Counter(
    "ctxd_usage_cache_write_tokens_total",
    "Input tokens the provider wrote to its prompt cache (RecordUsage).",
)
COMPACTION_CACHE_PREDICTED = Counter(
    "ctxd_compaction_cache_write_predicted_tokens_total",
    "Cache writes compactions predicted (CacheEffect.tokens_rewritten), counted "
    "when the first usage report after the compaction arrives, by trigger.",
    ["trigger"],
)
COMPACTION_CACHE_WRITES = Counter(
    "ctxd_compaction_cache_write_tokens_total",
    "Cache writes the provider reported on the first usage report after a compaction, by trigger.",
    ["trigger"],
)
MEMORY_KEYS = Gauge("ctxd_memory_keys", "Live agent-memory keys in this instance.")
MEMORY_BYTES = Gauge("ctxd_memory_bytes", "Bytes of agent-memory values in this instance.")


class Endpoint:
    """A running metrics endpoint; :meth:`close` frees its port."""

    def __init__(self, server: Any, thread: threading.Thread) -> None:
        self._server, self._thread = server, thread

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def serve(address: str) -> Endpoint:
    """Start the metrics HTTP endpoint (``host:port``) in a daemon thread."""
    host, _, port = address.rpartition(":")
    return Endpoint(*start_http_server(int(port), addr=host or "127.0.0.1"))


class PrometheusObserver:
    """The domain's observers (:mod:`ctxd_sidecar.core.observe`) as Prometheus metrics."""

    def __init__(self) -> None:
        #: Store latency series by (backend, op): every RPC that touches the
        #: store records one, and ``labels()`` costs more than ``observe()``.
        self._store_latency: dict[tuple[str, str], Histogram] = {}

    def compaction(self, trigger: str, result: str) -> None:
        COMPACTIONS.labels(trigger, result).inc()

    def compaction_fidelity(self, trigger: str, score: float, dropped: dict[str, int]) -> None:
        COMPACTION_FIDELITY.labels(trigger).observe(score)
        for kind, n in dropped.items():
            COMPACTION_DROPPED.labels(kind).inc(n)

    def summary_refused(self, trigger: str, reason: str) -> None:
        SUMMARIES_REFUSED.labels(trigger, reason).inc()

    def memory_counts(self, keys: int, value_bytes: int) -> None:
        MEMORY_KEYS.set(keys)
        MEMORY_BYTES.set(value_bytes)

    def contexts_resident(self, count: int) -> None:
        CONTEXTS_RESIDENT.set(count)

    def context_tokens(self, tokens: int) -> None:
        CONTEXT_TOKENS.observe(tokens)

    def cache_usage(self, input_tokens: int, cached: int, written: int) -> None:
        USAGE_INPUT.inc(input_tokens)
        USAGE_CACHED.inc(cached)
        USAGE_CACHE_WRITES.inc(written)

    def compaction_cache(self, trigger: str, predicted: int, written: int) -> None:
        COMPACTION_CACHE_PREDICTED.labels(trigger).inc(predicted)
        COMPACTION_CACHE_WRITES.labels(trigger).inc(written)

    def store_op(self, backend: str, op: str, seconds: float, error_kind: str | None) -> None:
        """As ``ctxd_store_operation_seconds`` and ``ctxd_store_errors_total``."""
        if error_kind is not None:
            STORE_ERRORS.labels(backend, op, error_kind).inc()
        series = self._store_latency.get((backend, op))
        if series is None:
            series = self._store_latency[backend, op] = STORE_LATENCY.labels(backend, op)
        series.observe(seconds)
