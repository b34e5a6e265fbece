"""A fault-injecting HTTP proxy for S3 tests: boto3 -> proxy -> moto server.

Faults are queued rules matched by HTTP method (and optionally a path
fragment); each fires ``times`` times. Actions:

* ``status``: answer with an S3-style error (500, 503 SlowDown, 409...)
  without forwarding;
* ``reset``: drop the connection (RST) without forwarding;
* ``reset_after_forward``: forward (the upstream applies the request), then
  drop the connection, so the client never sees the reply and retries;
* ``delay``: sleep, then forward.

``down()`` makes every request fail with a reset until ``up()``.
"""

from __future__ import annotations

import http.client
import socket
import struct
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade"}


@dataclass
class Fault:
    action: str
    method: str | None = None
    path_contains: str | None = None
    status: int = 503
    code: str = "SlowDown"
    delay: float = 0.0
    times: int = 1

    def matches(self, method: str, path: str) -> bool:
        return (self.method is None or self.method == method) and (
            self.path_contains is None or self.path_contains in path
        )


class FaultProxy:
    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname, parts.port)
        self.faults: list[Fault] = []
        self.injected: list[tuple[str, str, str]] = []  # (action, method, path)
        self.forwarded: list[tuple[str, str]] = []
        self.is_down = False
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _handle(self):
                proxy._serve(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def add(self, action: str, **kwargs) -> Fault:
        fault = Fault(action, **kwargs)
        with self._lock:
            self.faults.append(fault)
        return fault

    def down(self) -> None:
        self.is_down = True

    def up(self) -> None:
        self.is_down = False

    def count(self, method: str, path_contains: str = "") -> int:
        return sum(1 for m, p in self.forwarded if m == method and path_contains in p)

    # -- request handling ---------------------------------------------------------
    def _take(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.times > 0 and fault.matches(method, path):
                    fault.times -= 1
                    self.injected.append((fault.action, method, path))
                    return fault
        return None

    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        body = _read_body(h)
        if self.is_down:
            self.injected.append(("down", h.command, h.path))
            return _reset(h)
        fault = self._take(h.command, h.path)
        if fault is not None and fault.action == "reset":
            return _reset(h)
        if fault is not None and fault.action == "status":
            payload = (
                f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{fault.code}</Code>'
                f"<Message>injected</Message></Error>"
            ).encode()
            h.send_response(fault.status)
            h.send_header("Content-Type", "application/xml")
            h.send_header("Content-Length", str(len(payload)))
            h.end_headers()
            h.wfile.write(payload)
            return None
        if fault is not None and fault.action == "delay":
            time.sleep(fault.delay)
        status, headers, data = self._forward(h, body)
        if fault is not None and fault.action == "reset_after_forward":
            return _reset(h)
        h.send_response(status)
        for k, v in headers:
            if k.lower() not in _HOP_HEADERS and k.lower() != "content-length":
                h.send_header(k, v)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(data)
        return None

    def _forward(self, h: BaseHTTPRequestHandler, body: bytes):
        conn = http.client.HTTPConnection(*self.upstream, timeout=30)
        headers = {k: v for k, v in h.headers.items() if k.lower() not in _HOP_HEADERS}
        headers["Content-Length"] = str(len(body))
        conn.request(h.command, h.path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        with self._lock:
            self.forwarded.append((h.command, h.path))
        return resp.status, resp.getheaders(), data


def _read_body(h: BaseHTTPRequestHandler) -> bytes:
    if h.headers.get("Transfer-Encoding", "").lower() == "chunked":
        out = b""
        while True:
            size = int(h.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while h.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return out
            out += h.rfile.read(size)
            h.rfile.readline()
    length = int(h.headers.get("Content-Length") or 0)
    return h.rfile.read(length) if length else b""


def _reset(h: BaseHTTPRequestHandler) -> None:
    h.close_connection = True
    try:
        h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        h.connection.close()
    except OSError:
        pass
