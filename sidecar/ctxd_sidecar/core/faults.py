"""Hooks for crash-consistency tests, and nothing else.

A real sidecar started with ``CTXD_CRASH_POINT=<name>`` exits at once when it
reaches :func:`crash_point` with that name, so a test can stop it between
two writes (e.g. ``memory.after_index_add``). ``CTXD_INDEX_PAGE_MAX`` makes
key-index pages split early, so tests reach splits with few names. Without
the variables nothing changes.
"""

from __future__ import annotations

import os

_CRASH_POINT = os.environ.get("CTXD_CRASH_POINT", "")

#: Entries per key-index page, when a test asks for small pages (0: the default).
INDEX_PAGE_MAX = int(os.environ.get("CTXD_INDEX_PAGE_MAX", "") or 0)

#: Exit status of a process stopped at a crash point.
CRASH_EXIT_STATUS = 70


def crash_point(name: str) -> None:
    """Exit the process at once when ``CTXD_CRASH_POINT`` names this point."""
    if _CRASH_POINT and _CRASH_POINT == name:
        os._exit(CRASH_EXIT_STATUS)
