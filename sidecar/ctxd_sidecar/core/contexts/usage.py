"""RecordUsage: a provider's reported usage calibrates a context's token
estimate (:mod:`.tokens`) and, when it carries cache counts, moves the
context's prompt-cache figures (:mod:`.cacheuse`). Not a versioned change:
both ride along with the next record and checkpoint."""

from __future__ import annotations

from dataclasses import replace

from ctxd_sidecar.core.contexts import cacheuse, validate
from ctxd_sidecar.core.contexts.cacheuse import CacheUsage
from ctxd_sidecar.core.contexts.model import ContextState
from ctxd_sidecar.core.contexts.persistence import not_found
from ctxd_sidecar.core.contexts.service import ContextService
from ctxd_sidecar.core.errors import InvalidArgument


async def record_usage(
    service: ContextService,
    context_id: str,
    input_tokens: int,
    output_tokens: int = 0,
    model: str = "",
    cached: int | None = None,
    written: int | None = None,
) -> tuple[int, float, CacheUsage]:
    """(estimate, calibration ratio, cache figures) after one usage report.
    ``cached``/``written`` None: the provider said nothing of its cache."""
    cid = validate.context_id(context_id)
    if input_tokens <= 0:
        raise InvalidArgument(
            "input_tokens", "must be positive (the provider's reported prompt tokens)"
        )
    if output_tokens < 0:
        raise InvalidArgument("output_tokens", "must not be negative")
    validate.bounded(model, "model", validate.MAX_MODEL_NAME)
    cacheuse.check(input_tokens, cached, written)
    async with service.held(cid) as st:
        if st is None or not st.exists:
            raise not_found(cid)
        if st.calibration.observe(input_tokens, st.raw_tokens, model or st.model):
            st.dirty = True
        if cached is not None or written is not None:
            _cache_usage(service, st, input_tokens, cached or 0, written or 0)
        ratio = st.calibration.ratio if st.calibration.samples else 1.0
        cache = st.calibration.cache
        return st.est_tokens, ratio, replace(cache, after=dict(cache.after))


def _cache_usage(
    service: ContextService, st: ContextState, input_tokens: int, cached: int, written: int
) -> None:
    """Add a report's cache counts; the first after a compaction is also
    counted against what that compaction predicted."""
    rec = st.compactions[-1] if st.compactions else None
    last = str(rec["id"]) if rec is not None else ""
    first_after = st.calibration.cache.observe(input_tokens, cached, written, last)
    st.dirty = True
    service.usage_observer.cache_usage(input_tokens, cached, written)
    if rec is not None and first_after:
        trigger = str(rec.get("trig", "")) or "unknown"
        service.usage_observer.compaction_cache(trigger, int(rec.get("cfx", 0)), written)
