"""Back-off for the automatic compaction trigger (one per context).

After the k-th consecutive failure the next automatic attempt waits
``min(max_delay, initial_delay × factor^(k-1))`` seconds. After
``stop_after`` consecutive failures automatic attempts stop: until
:meth:`Backoff.reset` or a success (a manual compaction that works resets
it), or, when ``resume_after`` is set, until that many seconds have passed
since the last failure (then one more attempt is allowed; failing it stops
again). Manual compactions never consult :meth:`Backoff.allowed`.

Pure: the clock is injected (monotonic seconds), nothing sleeps.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class BackoffPolicy:
    initial_delay: float = 30.0
    factor: float = 2.0
    max_delay: float = 30 * 60.0
    #: Consecutive failures after which automatic attempts stop.
    stop_after: int = 5
    #: Seconds after the last failure that stopped attempts resume; None: only
    #: a reset or a success resumes them.
    resume_after: float | None = None

    def __post_init__(self) -> None:
        if self.initial_delay < 0 or self.max_delay < self.initial_delay:
            raise ValueError("back-off delays must satisfy 0 <= initial_delay <= max_delay")
        if self.factor < 1:
            raise ValueError("back-off factor must be at least 1")
        if self.stop_after < 1:
            raise ValueError("back-off stop_after must be at least 1")
        if self.resume_after is not None and self.resume_after <= 0:
            raise ValueError("back-off resume_after must be positive (or None)")

    @classmethod
    def from_config(cls, compaction) -> BackoffPolicy:
        """From a :class:`ctxd_sidecar.config.CompactionConfig` (``backoff_*`` keys)."""
        return cls(
            initial_delay=compaction.backoff_initial,
            max_delay=compaction.backoff_max,
            stop_after=compaction.backoff_stop_after,
            resume_after=compaction.backoff_resume_after or None,
        )

    def delay(self, failures: int) -> float:
        """Seconds to wait after ``failures`` consecutive failures (>= 1)."""
        if failures < 1:
            return 0.0
        return min(self.max_delay, self.initial_delay * self.factor ** min(failures - 1, 64))


@dataclass(frozen=True)
class BackoffStatus:
    failures: int
    #: Automatic attempts are stopped (see the module docstring).
    stopped: bool
    #: Seconds until the next automatic attempt is allowed; 0 = now; None =
    #: not before a reset.
    retry_in: float | None
    last_error: str

    def to_dict(self) -> dict:
        return {
            "failures": self.failures,
            "stopped": self.stopped,
            "retry_in": self.retry_in,
            "last_error": self.last_error,
        }


class Backoff:
    def __init__(
        self, policy: BackoffPolicy | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.policy = policy or BackoffPolicy()
        self._clock = clock
        self.failures = 0
        self.last_error = ""
        self._last_failure_at = 0.0

    @property
    def stopped(self) -> bool:
        return self.failures >= self.policy.stop_after

    def retry_in(self) -> float | None:
        """Seconds until an automatic attempt is allowed (0: now; None: never
        without a reset)."""
        if self.failures == 0:
            return 0.0
        if self.stopped:
            if self.policy.resume_after is None:
                return None
            wait = self.policy.resume_after
        else:
            wait = self.policy.delay(self.failures)
        return max(0.0, self._last_failure_at + wait - self._clock())

    def allowed(self) -> bool:
        """May an automatic compaction start now?"""
        return self.retry_in() == 0.0

    def record_failure(self, error: str) -> BackoffStatus:
        self.failures += 1
        self.last_error = error
        self._last_failure_at = self._clock()
        return self.status()

    def record_success(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.failures = 0
        self.last_error = ""
        self._last_failure_at = 0.0

    def status(self) -> BackoffStatus:
        return BackoffStatus(self.failures, self.stopped, self.retry_in(), self.last_error)
