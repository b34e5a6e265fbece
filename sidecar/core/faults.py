"""Crash injection for crash-consistency tests.

Lets a test stop a real sidecar between two writes (e.g.
``memory.after_index_add``) by naming the point in ``CTXD_CRASH_POINT``.
"""

from __future__ import annotations

import os

_CRASH_POINT = os.environ.get("CTXD_CRASH_POINT", "")


def crash_point(name: str) -> None:
    """Exit the process at once (status 70) when ``CTXD_CRASH_POINT`` names this point.

    A no-op unless the variable is set.
    """
    if _CRASH_POINT and _CRASH_POINT == name:
        os._exit(70)
