"""LISTEN on one dedicated connection and hand each changed key to the
callbacks watching a prefix of it (the CHANGE_FEED capability).

Notifications are a hint, not a log: after the connection drops and comes
back, every callback is called with ``None`` ("anything may have changed"),
so a watcher re-reads instead of missing what was written meanwhile.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

log = logging.getLogger(__name__)

Callback = Callable[[str | None], None]
#: Longest wait for notifications before checking whether to stop.
_POLL_S = 0.5
_BACKOFF_MAX_S = 2.0


class Listener:
    def __init__(self, conninfo: str, conn_kwargs: dict[str, Any], channel: str) -> None:
        self.conninfo = conninfo
        self.conn_kwargs = conn_kwargs
        self.channel = channel
        self._watchers: dict[int, tuple[str, Callback]] = {}
        self._next_id = 0
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._listening = threading.Event()
        self._thread = threading.Thread(target=self._run, name="postgres-listen", daemon=True)
        self._thread.start()
        # The first watcher should not miss a write made right after watch().
        self._listening.wait(10)

    def add(self, prefix: str, callback: Callback) -> Callable[[], None]:
        with self._lock:
            ident = self._next_id
            self._next_id += 1
            self._watchers[ident] = (prefix, callback)

        def cancel() -> None:
            with self._lock:
                self._watchers.pop(ident, None)

        return cancel

    def close(self) -> None:
        self._closed.set()
        self._thread.join(_POLL_S * 4)

    def _dispatch(self, key: str | None) -> None:
        with self._lock:
            targets = [
                cb
                for prefix, cb in self._watchers.values()
                if key is None or key.startswith(prefix)
            ]
        for callback in targets:
            try:
                callback(key)
            except Exception:  # noqa: BLE001 - one watcher must not stop the others
                log.exception("change callback failed")

    def _run(self) -> None:
        backoff = 0.05
        reconnected = False
        while not self._closed.is_set():
            try:
                with psycopg.connect(self.conninfo, autocommit=True, **self.conn_kwargs) as conn:
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
                    self._listening.set()
                    backoff = 0.05
                    if reconnected:
                        self._dispatch(None)
                    while not self._closed.is_set():
                        for note in conn.notifies(timeout=_POLL_S):
                            self._dispatch(note.payload)
            except psycopg.Error as exc:
                log.warning("change feed connection lost; reconnecting", extra={"error": repr(exc)})
                reconnected = True
                self._closed.wait(backoff)
                backoff = min(backoff * 2, _BACKOFF_MAX_S)
