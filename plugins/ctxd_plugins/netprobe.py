"""Why a TCP endpoint cannot be reached, in words an operator can act on.

A client library's connection error names its own exception type; opening a
store at start-up asks the network directly instead, so the refusal says
"nothing listening at host:port" or "cannot resolve host" from the socket
error itself, not from matching the library's message.
"""

from __future__ import annotations

import socket


def why_unreachable(host: str, port: int, timeout: float) -> str:
    """Why ``host:port`` does not accept a TCP connection; "" if it does."""
    where = f"{host}:{port}"
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return f"cannot resolve host {host}"
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return ""
    except ConnectionRefusedError:
        return f"nothing listening at {where} (connection refused)"
    except TimeoutError:
        return f"no answer from {where} within {timeout:g} s"
    except OSError as exc:
        return f"cannot connect to {where} ({exc.strerror or type(exc).__name__})"
