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
from collections.abc import Mapping
from dataclasses import dataclass

import grpc

DEFAULT_ADDRESS = "127.0.0.1:50051"


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
    return Target(
        address=address or DEFAULT_ADDRESS,
        token=token,
        ca=_read(ca_file, "CA file") if ca_file else None,
        cert=_read(cert_file, "client certificate") if cert_file else None,
        key=_read(key_file, "client key") if key_file else None,
        server_name=pick(args.tls_server_name, "CTXD_TLS_SERVER_NAME"),
        timeout=args.timeout,
    )


def rpc_error(exc: grpc.RpcError) -> AdminError:
    """``UNAUTHENTICATED: missing or invalid bearer token`` - status and the server's words."""
    code = exc.code() if hasattr(exc, "code") else None
    name = code.name if code is not None else "UNKNOWN"
    details = exc.details() if hasattr(exc, "details") else ""
    return AdminError(f"{name}: {details or 'no message'}")
