"""A TCP proxy for PostgreSQL tests: sidecar -> proxy -> server, able to lose
the server's reply to a statement after the server ran (and committed) it.

Faults, per statement the client sends (a chunk holding a query message):

* ``arm(marker, before_cut=...)``: the next statement whose bytes hold
  ``marker`` is forwarded; when its reply arrives (the server committed), the
  reply is dropped, ``before_cut`` runs (e.g. another writer writes on top)
  and the connection is cut, so the client never hears;
* ``drop_rate``: each statement has that chance of the same fate, with the
  cut ``hold`` seconds after the reply arrived (a slow, lossy link);
* ``pause(marker)``: the reply to the next statement holding ``marker`` waits
  until the returned event is set (a read that is slow exactly when a test
  wants it to be), then is delivered;
* ``delay``: every reply waits that long (a slow link).

``cuts`` counts replies dropped. ``stop()`` closes the listener and every
connection.
"""

from __future__ import annotations

import contextlib
import random
import socket
import threading
import time
from collections.abc import Callable

#: First bytes of the frontend messages that run a statement (simple query,
#: parse, bind, execute): the start-up and authentication exchange is never cut.
_STATEMENT = (b"Q", b"P", b"B", b"E")


class PgProxy:
    def __init__(self, host: str, port: int, *, seed: int = 0) -> None:
        self.upstream = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.drop_rate = 0.0
        self.hold = 0.0
        self.delay = 0.0
        self.cuts = 0
        self._marker: bytes | None = None
        self._before_cut: Callable[[], None] | None = None
        self._pause_marker: bytes | None = None
        self._release: threading.Event | None = None
        #: Set while a paused reply is held.
        self.paused = threading.Event()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def uri(self, store_uri: str, server_port: int) -> str:
        """``store_uri`` (to the server on ``server_port``) through this proxy."""
        return store_uri.replace(f":{server_port}/", f":{self.port}/")

    def arm(self, marker: bytes, before_cut: Callable[[], None] | None = None) -> None:
        with self._lock:
            self._marker, self._before_cut = marker, before_cut

    def pause(self, marker: bytes) -> threading.Event:
        """Hold the reply to the next statement holding ``marker`` until the
        returned event is set; ``paused`` is set once a reply is held."""
        release = threading.Event()
        with self._lock:
            self._pause_marker, self._release = marker, release
        return release

    def stop(self) -> None:
        self._closed = True
        self.listener.close()
        with self._lock:
            sockets = list(self._sockets)
        for s in sockets:
            _close(s)

    # -- pumping ----------------------------------------------------------------------
    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._sockets.update((client, server))
            # What happens to the reply to the statement last sent: None
            # (forward it), ("cut", callback to run first) or ("pause", event).
            fate: dict = {"cut": None}
            threading.Thread(target=self._up, args=(client, server, fate), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client, fate), daemon=True).start()

    def _decide(self, data: bytes) -> tuple | None:
        """The fate of the reply to ``data`` (see ``_accept``)."""
        if not data.startswith(_STATEMENT):
            return None
        with self._lock:
            if self._pause_marker is not None and self._pause_marker in data:
                release, self._pause_marker, self._release = self._release, None, None
                return ("pause", release)
            if self._marker is not None and self._marker in data:
                hook = self._before_cut or (lambda: None)
                self._marker = self._before_cut = None
                return ("cut", hook)
            if self.drop_rate and self._rng.random() < self.drop_rate:
                hold = self.hold
                return ("cut", lambda: time.sleep(hold))
        return None

    def _up(self, src: socket.socket, dst: socket.socket, fate: dict) -> None:
        try:
            while data := src.recv(65536):
                if fate["cut"] is None:
                    fate["cut"] = self._decide(data)
                dst.sendall(data)
        except OSError:
            pass
        _close(src)
        _close(dst)

    def _down(self, src: socket.socket, dst: socket.socket, fate: dict) -> None:
        try:
            while data := src.recv(65536):
                action, arg = fate["cut"] or (None, None)
                if action == "pause":
                    fate["cut"] = None
                    self.paused.set()
                    arg.wait()
                    self.paused.clear()
                elif action == "cut":
                    with self._lock:
                        self.cuts += 1
                    arg()  # the server answered: it ran the statement
                    break
                if self.delay:
                    time.sleep(self.delay)
                dst.sendall(data)
        except OSError:
            pass
        _close(src)
        _close(dst)


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    s.close()
