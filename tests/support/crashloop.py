"""The kill loop shared by the crash tests: SIGKILL a sidecar subprocess at
random moments while clients keep working, restarting it each time."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Hashable

import pytest


def kill_while_working(
    sc,
    progress: Callable[[], Hashable],
    alive: Callable[[], bool],
    rng: random.Random,
    *,
    kills: int,
    budget: float,
    max_pause: float = 0.3,
) -> int:
    """Kill and restart ``sc`` up to ``kills`` times within ``budget`` seconds.

    Before each kill it waits until ``progress()`` changes (so every restart
    sees at least one acknowledged call), then a random pause of up to
    ``max_pause`` seconds. Returns how many kills were made.
    """
    done = 0
    started = time.monotonic()
    while done < kills and time.monotonic() - started < budget:
        seen = progress()
        deadline = time.monotonic() + 30
        while progress() == seen and alive() and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, max_pause))
        sc.kill()  # SIGKILL
        done += 1
        sc.start(timeout=60)
    return done


def crash_runs(backends: list[str], kills: int, *, short_kills: int = 3) -> list:
    """Parameters ``(backend, kills)`` for a kill loop: one short run on LMDB
    in the default set, so every change meets a crash at least briefly, and
    the full loop on every backend in the slow set."""
    return [
        pytest.param("lmdb", short_kills, id="lmdb-short"),
        *(pytest.param(b, kills, id=b, marks=pytest.mark.slow) for b in backends),
    ]
