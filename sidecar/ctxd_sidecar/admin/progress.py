"""``ctxd migrate``'s progress display and dry-run destination."""

from __future__ import annotations

import os
import sys
import time
from urllib.parse import unquote, urlsplit


def dry_target(uri: str) -> str:
    """A dry run must not create an LMDB destination that does not exist yet:
    an absent one is an empty store, which ``memory://`` stands in for."""
    parts = urlsplit(uri)
    if parts.scheme.lower() == "lmdb" and not os.path.exists(unquote(parts.netloc + parts.path)):
        return "memory://"
    return uri


def require_source(uri: str) -> None:
    """A migration source must exist: opening a mistyped ``lmdb://`` path
    would create an empty store and copy nothing, reported as success."""
    parts = urlsplit(uri)
    if parts.scheme.lower() != "lmdb":
        return
    path = unquote(parts.netloc + parts.path)
    if path and not os.path.isfile(os.path.join(path, "data.mdb")):
        raise ValueError(f"the source {uri} does not exist (no LMDB environment at {path})")


class Progress:
    """``migrate: 120/480 (25%) 310/s`` on stderr: rewritten in place on a
    terminal, a line at most every 2 s (and the last) otherwise."""

    def __init__(self, stream=None) -> None:
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.clock = time.monotonic
        self.start = self.clock()
        self.shown = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = self.clock()
        last = done >= total
        if not last and now - self.shown < (0.2 if self.tty else 2.0):
            return
        self.shown = now
        rate = done / max(now - self.start, 1e-6)
        pct = f" ({100 * done // total}%)" if total else ""
        text = f"migrate: {done}/{total}{pct} {rate:.0f}/s"
        if self.tty:
            self.stream.write("\r" + text + ("\n" if last else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
