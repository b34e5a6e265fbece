"""The suite's own map stays true: every store variant that tests/conftest.py
sends to the slow set names a test that exists (a renamed test would otherwise
come back to the default set unnoticed), and the default set keeps a short run
of every kill loop."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import SLOW_VARIANTS

ROOT = Path(__file__).resolve().parents[2]


def _collected(*args: str) -> set[str]:
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return {line.removeprefix("tests/") for line in r.stdout.splitlines() if "::" in line}


def test_every_slow_variant_names_a_collected_slow_test():
    slow = _collected("-m", "slow", "tests/memory", "tests/contexts", "tests/ops/test_migrate.py")
    assert SLOW_VARIANTS <= slow, SLOW_VARIANTS - slow


def test_the_default_set_keeps_a_short_run_of_every_kill_loop():
    default = _collected("-m", "not slow", "tests/reliability")
    short = {
        n.split("::")[0]
        for n in default
        if n.endswith("[lmdb-short]@timing") or "[lmdb-short]" in n
    }
    loops = {
        p.relative_to(ROOT / "tests").as_posix()
        for p in (ROOT / "tests/reliability").glob("test_*crash*.py")
    }
    loops -= {"reliability/test_durability_crash.py"}  # its loops are slow-only: one per admin verb
    assert loops and loops <= short, loops - short
