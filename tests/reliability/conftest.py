"""Crash loops, model-based runs and load. Each long run is marked ``slow``
where it is declared (``scripts/test.sh slow`` runs them, a CI step of its
own); the default set keeps a short example of each kind: a few kills on
LMDB per crash loop (``tests/support/crashloop.py:crash_runs``), the short
model-based profiles, and the quick edge cases (disk full, read-only data
directory, a deletion cut short)."""
