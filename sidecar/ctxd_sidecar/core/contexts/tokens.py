"""Token estimates: provider-independent, cheap, and kept incrementally.

ctxd never counts provider tokens. Its estimate is ``ceil(chars / 4)`` per
text (Unicode code points) plus :data:`MESSAGE_OVERHEAD` per message; JSON
(tool arguments, structured tool results) is counted by its text. A message's
estimate is computed once, when it is appended, and the context keeps the
running sum, so a turn costs O(its own size), never a recount.

Once a provider call returns, its reported usage is the truth. A runtime
reports it with ``RecordUsage``; :class:`Calibration` turns the ratio between
the provider's input tokens and ctxd's raw estimate into a per-context factor
applied to ``est_tokens``:

* the first sample for a model is taken as is; later ones are smoothed
  (exponential moving average, weight :data:`SMOOTHING` for the new sample);
* each sample is clamped to [:data:`MIN_RATIO`, :data:`MAX_RATIO`]: the
  provider also counts the system prompt and tool schemas ctxd never sees,
  so a ratio far from 1 on a short context says more about those than about
  the transcript;
* samples taken when the raw estimate is below :data:`MIN_SAMPLE_TOKENS`
  are ignored (too noisy to mean anything);
* reporting a different model than the calibrated one starts over.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ctxd_sidecar.core.contexts.cacheuse import CacheUsage

# The one estimate, re-exported for the contexts package.
from ctxd_sidecar.core.estimate import MESSAGE_OVERHEAD as MESSAGE_OVERHEAD

#: Known model windows: the first entry whose test matches the lower-cased
#: model name wins.
_WINDOWS: tuple[tuple[str, str, int], ...] = (
    ("contains", "claude", 200_000),
    ("contains", "gpt-4.1", 1_000_000),
    ("contains", "gpt-4o", 128_000),
    ("contains", "gpt-5", 128_000),
    ("prefix", "o1", 128_000),
    ("prefix", "o3", 128_000),
    ("prefix", "o4", 128_000),
    ("contains", "gemini", 1_000_000),
)
DEFAULT_MODEL_WINDOW = 128_000

#: Calibration bounds and smoothing (see the module docstring).
MIN_RATIO = 0.5
MAX_RATIO = 3.0
SMOOTHING = 0.3
MIN_SAMPLE_TOKENS = 64


def window_for_model(name: str, default: int = DEFAULT_MODEL_WINDOW) -> int:
    """The context window of a model by name (:data:`_WINDOWS`), else ``default``."""
    n = name.strip().lower()
    if not n:
        return default
    for test, needle, window in _WINDOWS:
        if n.startswith(needle) if test == "prefix" else needle in n:
            return window
    return default


@dataclass(slots=True)
class Calibration:
    """Provider tokens per estimated token for one context (1.0 = uncalibrated)."""

    ratio: float = 1.0
    model: str = ""
    samples: int = 0
    #: The provider's prompt-cache figures (they ride with the calibration).
    cache: CacheUsage = field(default_factory=CacheUsage)

    @property
    def kept(self) -> bool:
        """Whether there is anything to persist."""
        return bool(self.samples or self.cache.reports)

    def apply(self, raw_tokens: int) -> int:
        return raw_tokens if self.samples == 0 else math.ceil(raw_tokens * self.ratio)

    def observe(self, provider_tokens: int, raw_tokens: int, model: str = "") -> bool:
        """Fold one usage report in; False when the sample was ignored."""
        if provider_tokens <= 0 or raw_tokens < MIN_SAMPLE_TOKENS:
            return False
        sample = min(MAX_RATIO, max(MIN_RATIO, provider_tokens / raw_tokens))
        if model and model != self.model:
            self.model, self.samples = model, 0
        if self.samples == 0:
            self.ratio = sample
        else:
            self.ratio = (1 - SMOOTHING) * self.ratio + SMOOTHING * sample
        self.samples += 1
        return True

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ratio": self.ratio, "model": self.model, "samples": self.samples}
        if self.cache.reports:
            out["cache"] = self.cache.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Calibration:
        if not d:
            return cls()
        return cls(
            float(d.get("ratio", 1.0)),
            str(d.get("model", "")),
            int(d.get("samples", 0)),
            CacheUsage.from_dict(d.get("cache")),
        )
