"""Back-off of the automatic compaction trigger (clock injected)."""

from __future__ import annotations

import pytest

from ctxd_sidecar import config as config_mod
from ctxd_sidecar.core.compaction import Backoff, BackoffPolicy


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_delays_grow_exponentially_up_to_the_cap():
    policy = BackoffPolicy(initial_delay=10, factor=2, max_delay=60, stop_after=100)
    assert [policy.delay(k) for k in range(0, 7)] == [0, 10, 20, 40, 60, 60, 60]


def test_failures_back_off_then_allow_again():
    clock = Clock()
    b = Backoff(BackoffPolicy(initial_delay=10, max_delay=100, stop_after=5), clock)
    assert b.allowed() and b.status().failures == 0
    status = b.record_failure("summariser 'openai' timed out")
    assert (status.failures, status.stopped, status.retry_in) == (1, False, 10)
    assert not b.allowed()
    clock.now += 9.5
    assert not b.allowed() and b.retry_in() == pytest.approx(0.5)
    clock.now += 0.5
    assert b.allowed()
    b.record_failure("again")
    assert b.retry_in() == 20
    clock.now += 20
    assert b.allowed()


def test_stops_after_repeated_failures_until_reset():
    clock = Clock()
    b = Backoff(BackoffPolicy(initial_delay=1, max_delay=8, stop_after=3), clock)
    for _ in range(3):
        clock.now += 1000
        b.record_failure("malformed answer")
    status = b.status()
    assert status.stopped and status.retry_in is None and status.failures == 3
    assert status.last_error == "malformed answer"
    clock.now += 10**9
    assert not b.allowed()  # never a loop: no automatic attempt until reset
    assert status.to_dict() == {
        "failures": 3,
        "stopped": True,
        "retry_in": None,
        "last_error": "malformed answer",
    }
    b.record_success()  # e.g. a manual compaction worked
    assert b.allowed() and b.status().failures == 0 and b.status().last_error == ""


def test_stopped_attempts_resume_after_a_while_when_configured():
    clock = Clock()
    b = Backoff(BackoffPolicy(initial_delay=1, max_delay=8, stop_after=2, resume_after=600), clock)
    b.record_failure("x")
    clock.now += 1
    b.record_failure("x")
    assert b.stopped and b.retry_in() == 600
    clock.now += 600
    assert b.allowed()
    b.record_failure("x")  # the one attempt failed: stopped again for the same while
    assert b.stopped and not b.allowed() and b.retry_in() == 600


def test_policy_from_config_and_validation():
    cfg = config_mod.CompactionConfig(
        backoff_initial=5, backoff_max=50, backoff_stop_after=4, backoff_resume_after=0
    )
    policy = BackoffPolicy.from_config(cfg)
    assert (policy.initial_delay, policy.max_delay, policy.stop_after) == (5, 50, 4)
    assert policy.resume_after is None
    assert BackoffPolicy.from_config(config_mod.CompactionConfig()).resume_after == 3600
    with pytest.raises(ValueError):
        BackoffPolicy(initial_delay=10, max_delay=5)
    with pytest.raises(ValueError):
        BackoffPolicy(stop_after=0)
    with pytest.raises(ValueError):
        BackoffPolicy(factor=0.5)
