"""What a connection needs beyond the channel: the bearer token (re-read from
its file when the file changes, so a rotated secret needs no restart), and
telling a failure that retrying can fix from one it cannot; the channel's
target, credentials and options, and the retry policy.

gRPC reports every failed connection as UNAVAILABLE, whether the sidecar is
restarting (retry) or the address is a TLS port dialled in plaintext, the
other way round, or no gRPC server at all (retrying only wastes the
deadline). :func:`diagnose` reads the cause gRPC gives and, where gRPC says
no more than "Socket closed", asks the port whether it speaks TLS.
"""

from __future__ import annotations

import os
import random
import socket
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path

import grpc

from ctxd_client.errors import CtxdError, Unauthenticated, Unavailable, Unimplemented

DEFAULT_ADDRESS = "127.0.0.1:50051"
DEFAULT_TIMEOUT = 10.0

#: Reconnect quickly after a sidecar restart instead of gRPC's default 1 s+ back-off.
CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


@dataclass(frozen=True)
class Retry:
    """Bounded retries on UNAVAILABLE, for calls that are safe to repeat
    (AppendTurn with its idempotency key, and reads)."""

    attempts: int = 8
    initial_backoff: float = 0.1
    max_backoff: float = 4.0

    def delay(self, attempt: int) -> float:
        base = min(self.max_backoff, self.initial_backoff * (2**attempt))
        return base * random.uniform(0.5, 1.0)


DEFAULT_RETRY = Retry()


def _read(value: bytes | str | os.PathLike | None) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    return Path(value).read_bytes()


def channel_args(
    address: str | None,
    *,
    tls: bool,
    root_ca: bytes | str | os.PathLike | None,
    client_cert: bytes | str | os.PathLike | None,
    client_key: bytes | str | os.PathLike | None,
    server_name: str | None,
) -> tuple[str, grpc.ChannelCredentials | None, list]:
    """Target, credentials (None for plaintext) and options for a channel."""
    target = address or os.environ.get("CTXD_ADDRESS") or DEFAULT_ADDRESS
    options = list(CHANNEL_OPTIONS)
    if server_name:
        options.append(("grpc.ssl_target_name_override", server_name))
    if not (tls or root_ca or client_cert or client_key):
        return target, None, options
    creds = grpc.ssl_channel_credentials(
        root_certificates=_read(root_ca),
        private_key=_read(client_key),
        certificate_chain=_read(client_cert),
    )
    return target, creds, options


#: Seconds the TLS probe of a port may take.
PROBE_TIMEOUT = 0.5

TLS_FAILURES = ("handshake failed", "ssl_error", "wrong_version_number", "tsi_")
NOT_GRPC = ("failed parsing http/2", "http1.x", "trying to connect an http1")


class TokenSource:
    """The token to send: given, else ``$CTXD_TOKEN_FILE`` (re-read when the
    file changes), else ``$CTXD_TOKEN``; none means no authorization header."""

    def __init__(self, token: str | None = None, token_file: str | None = None) -> None:
        self._token = token
        self._file = token_file if token is None else None
        if token is None and token_file is None:
            self._file = os.environ.get("CTXD_TOKEN_FILE") or None
            if self._file is None:
                self._token = os.environ.get("CTXD_TOKEN") or None
        self._seen: tuple | None = None
        self._metadata: tuple = ()
        self._lock = threading.Lock()
        if self._file is None:
            self._metadata = (("authorization", f"Bearer {self._token}"),) if self._token else ()
        else:
            self.metadata()  # an unreadable file fails at construction, naming it

    def metadata(self) -> tuple:
        if self._file is None:
            return self._metadata
        try:
            st = os.stat(self._file)
        except OSError as exc:
            raise CtxdError(f"cannot read the token file {self._file}: {exc.strerror}") from None
        # Kubernetes swaps a Secret's files through a symlink: inode and mtime change.
        seen = (st.st_ino, st.st_mtime_ns, st.st_size)
        with self._lock:
            if seen != self._seen:
                try:
                    with open(self._file, encoding="utf-8") as fh:
                        token = fh.read().strip()
                except OSError as exc:
                    raise CtxdError(
                        f"cannot read the token file {self._file}: {exc.strerror}"
                    ) from None
                self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
                self._seen = seen
            return self._metadata


def _speaks_tls(address: str) -> bool:
    """Whether ``host:port`` completes a TLS handshake (certificate unchecked)."""
    if address.startswith(("unix:", "unix-abstract:")):
        return False
    target = address.removeprefix("dns:///").removeprefix("ipv4:").removeprefix("ipv6:")
    host, _, port = target.rpartition(":")
    host = host.strip("[]")
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    try:
        with socket.create_connection((host, int(port)), timeout=PROBE_TIMEOUT) as raw:
            with ctx.wrap_socket(raw, server_hostname=host or None):
                return True
    except (OSError, ValueError):
        return False


def diagnose(exc: CtxdError, address: str, *, plaintext: bool) -> CtxdError:
    """``exc`` with the address and the cause named; a connection failure
    that retrying cannot fix becomes :class:`CannotConnect`."""
    if isinstance(exc, CannotConnect) or exc.address:
        return exc
    text = exc.message.lower()
    if isinstance(exc, Unavailable):
        if any(s in text for s in NOT_GRPC):
            return CannotConnect.of(
                exc, address, "the server there does not speak gRPC (a metrics or HTTP port?)"
            )
        if any(s in text for s in TLS_FAILURES):
            cause = (
                "the server there does not speak TLS; connect without tls/root_ca"
                if "wrong_version_number" in text
                else "the TLS handshake failed (certificate, CA or server name)"
            )
            return CannotConnect.of(exc, address, cause)
        if plaintext and "socket closed" in text and _speaks_tls(address):
            return CannotConnect.of(
                exc, address, "the server there speaks TLS; connect with tls=True or root_ca="
            )
        return exc
    if isinstance(exc, Unimplemented):
        exc.address, exc.cause = address, "the server there is not a ctxd sidecar of this API"
    elif isinstance(exc, Unauthenticated):
        exc.address, exc.cause = (
            address,
            "the sidecar wants a bearer token: set CTXD_TOKEN_FILE or CTXD_TOKEN (or token=)",
        )
    return exc


class CannotConnect(Unavailable):
    """A connection that retrying cannot fix: a TLS mismatch, or no gRPC
    server at the address. Raised at once, not retried."""

    @classmethod
    def of(cls, exc: CtxdError, address: str, cause: str) -> CannotConnect:
        out = cls(exc.message, code=exc.code, details=exc.details)
        out.address, out.cause = address, cause
        return out
