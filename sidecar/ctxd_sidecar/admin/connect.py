"""Where the sidecar is and how to authenticate: flags first, then ``CTXD_*``.

The client reads the same names the agent container is given
(``CTXD_ADDRESS``, ``CTXD_TOKEN_FILE``) and falls back to the server's own
(``CTXD_AUTH_TOKEN_FILE``, ``CTXD_LISTEN``), so ``kubectl exec`` into the
ctxd container needs no extra flags. Client TLS has names of its own
(``CTXD_TLS_CA_FILE``, ``CTXD_TLS_CLIENT_CERT_FILE``, ``CTXD_TLS_CLIENT_KEY_FILE``)
because ``CTXD_TLS_CERT_FILE`` is the server's certificate.
"""

from __future__ import annotations

import argparse
import os
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass

import grpc

DEFAULT_ADDRESS = "127.0.0.1:50051"
#: What gRPC says when the server at the address is not a gRPC server, or
#: when the TLS of the two sides differ (the clients read the same words).
_NOT_GRPC = ("failed parsing http/2", "http1.x", "trying to connect an http1")
_TLS_FAILURES = ("handshake failed", "ssl_error", "wrong_version_number", "tsi_")


class AdminError(Exception):
    """One line for stderr, and the exit code (1: the call failed, 2: usage)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.message = " ".join(message.split())
        self.code = code


def add_connection_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("connection (flags override CTXD_* environment)")
    g.add_argument("--address", help=f"host:port or unix:PATH (CTXD_ADDRESS; {DEFAULT_ADDRESS})")
    g.add_argument("--token-file", help="file holding the bearer token (CTXD_TOKEN_FILE)")
    g.add_argument("--token", help="the bearer token itself (CTXD_TOKEN; prefer a file)")
    g.add_argument("--tls-ca-file", help="CA bundle to verify the server (CTXD_TLS_CA_FILE)")
    g.add_argument(
        "--tls-cert-file", help="client certificate for mTLS (CTXD_TLS_CLIENT_CERT_FILE)"
    )
    g.add_argument("--tls-key-file", help="client private key for mTLS (CTXD_TLS_CLIENT_KEY_FILE)")
    g.add_argument(
        "--tls-server-name", help="name to verify in the server certificate (CTXD_TLS_SERVER_NAME)"
    )
    g.add_argument(
        "--timeout", type=float, default=30.0, help="seconds per call (default 30; not for watch)"
    )


@dataclass(frozen=True)
class Target:
    address: str
    token: str = ""
    ca: bytes | None = None
    cert: bytes | None = None
    key: bytes | None = None
    server_name: str = ""
    timeout: float = 30.0

    @property
    def secure(self) -> bool:
        return self.ca is not None or self.cert is not None

    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),) if self.token else ()

    def channel(self) -> grpc.Channel:
        options = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]
        if self.server_name:
            options.append(("grpc.ssl_target_name_override", self.server_name))
        if not self.secure:
            return grpc.insecure_channel(self.address, options=options)
        creds = grpc.ssl_channel_credentials(
            root_certificates=self.ca, private_key=self.key, certificate_chain=self.cert
        )
        return grpc.secure_channel(self.address, creds, options=options)


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise AdminError(f"cannot read {what} {path}: {exc.strerror}", 2) from None


def _address_from_listen(listen: str) -> str:
    """The server's listen address as a client would dial it (0.0.0.0 -> loopback)."""
    host, sep, port = listen.rpartition(":")
    if listen.startswith("unix:") or not sep:
        return listen
    if host in {"0.0.0.0", "", "[::]", "::"}:
        host = "127.0.0.1"
    return f"{host}:{port}"


def target(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> Target:
    env = os.environ if env is None else env

    def pick(flag: str | None, *names: str) -> str:
        if flag:
            return flag
        return next((env[n] for n in names if env.get(n)), "")

    address = args.address or env.get("CTXD_ADDRESS") or ""
    if not address and env.get("CTXD_LISTEN"):
        address = _address_from_listen(env["CTXD_LISTEN"])
    token = args.token or ""
    if not token:
        token_file = args.token_file or ""
        if not token_file and not env.get("CTXD_TOKEN"):
            token_file = pick(None, "CTXD_TOKEN_FILE", "CTXD_AUTH_TOKEN_FILE")
        if token_file:
            token = _read(token_file, "token file").decode("utf-8", "replace").strip()
            if not token:
                raise AdminError(f"token file {token_file} is empty", 2)
        else:
            token = pick(None, "CTXD_TOKEN", "CTXD_AUTH_TOKEN")
    ca_file = pick(args.tls_ca_file, "CTXD_TLS_CA_FILE")
    cert_file = pick(args.tls_cert_file, "CTXD_TLS_CLIENT_CERT_FILE")
    key_file = pick(args.tls_key_file, "CTXD_TLS_CLIENT_KEY_FILE")
    if bool(cert_file) != bool(key_file):
        raise AdminError("--tls-cert-file and --tls-key-file must be given together", 2)
    address = address or DEFAULT_ADDRESS
    _check_port(address)
    return Target(
        address=address,
        token=token,
        ca=_read(ca_file, "CA file") if ca_file else None,
        cert=_read(cert_file, "client certificate") if cert_file else None,
        key=_read(key_file, "client key") if key_file else None,
        server_name=pick(args.tls_server_name, "CTXD_TLS_SERVER_NAME"),
        timeout=args.timeout,
    )


def _check_port(address: str) -> None:
    """A host:port address's port is a number in 1-65535 (gRPC would dial another)."""
    if address.startswith(("unix:", "unix-abstract:")):
        return
    _, sep, port = address.rpartition(":")
    if sep and not (port.isdigit() and 1 <= int(port) <= 65535):
        raise AdminError(f"--address {address}: the port must be a number in 1-65535", 2)


def _speaks_tls(address: str) -> bool:
    """Whether ``host:port`` completes a TLS handshake (certificate unchecked)."""
    host, _, port = address.removeprefix("dns:///").rpartition(":")
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=2) as raw:
            with ctx.wrap_socket(raw, server_hostname=host.strip("[]") or None):
                return True
    except (OSError, ValueError):
        return False


def _cause(name: str, details: str, target: Target | None) -> str:
    """Why a call could not connect, in the clients' words ("" when gRPC's say it)."""
    text = details.lower()
    if target is None or name != "UNAVAILABLE":
        return ""
    if any(s in text for s in _NOT_GRPC):
        return "the server there does not speak gRPC (a metrics or HTTP port?)"
    if any(s in text for s in _TLS_FAILURES):
        if "wrong_version_number" in text:
            return "the server there does not speak TLS; connect without --tls-ca-file"
        return "the TLS handshake failed (certificate, CA or server name)"
    if not target.secure and "socket closed" in text and _speaks_tls(target.address):
        return "the server there speaks TLS; connect with --tls-ca-file"
    return ""


def rpc_error(exc: grpc.RpcError, target: Target | None = None) -> AdminError:
    """``UNAUTHENTICATED: missing or invalid bearer token`` - status and the server's words;
    a connection that failed names the address and, as the clients do, the cause."""
    code = exc.code() if hasattr(exc, "code") else None
    name = code.name if code is not None else "UNKNOWN"
    details = exc.details() if hasattr(exc, "details") else ""
    cause = _cause(name, details or "", target)
    if cause:
        return AdminError(f"cannot connect to {target.address}: {cause}")
    return AdminError(f"{name}: {details or 'no message'}")
