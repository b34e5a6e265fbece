"""The sidecar process: gRPC server, health, reflection, graceful shutdown."""

from __future__ import annotations

import asyncio
import logging
import signal

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from sidecar import metrics
from sidecar.api.ctxd.v1 import context_pb2, memory_pb2
from sidecar.config import Config
from sidecar.core.errors import CtxdError
from sidecar.plugins import plugin_manager
from sidecar.server import composition
from sidecar.server.interceptors import AuthInterceptor, ServiceInterceptor
from sidecar.server.registration import add_service

log = logging.getLogger(__name__)

SERVICE_NAMES = (
    context_pb2.DESCRIPTOR.services_by_name["ContextService"].full_name,
    memory_pb2.DESCRIPTOR.services_by_name["MemoryService"].full_name,
)

#: gRPC's own limit on one message; bigger requests fail with RESOURCE_EXHAUSTED.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


class Sidecar:
    """One running ctxd: start it, wait for a stop signal, stop it."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.server: grpc.aio.Server | None = None
        self.health = health.aio.HealthServicer()
        self.address: str | None = None
        self._stopped = asyncio.Event()

    async def start(self) -> str:
        """Open the store and start serving; return the bound address."""
        cfg = self.config
        self.domain = await composition.build(cfg, plugin_manager())
        self.storage = self.domain.storage
        self.contexts, self.memory = composition.servicers(self.domain)

        interceptors: list[grpc.aio.ServerInterceptor] = []
        token = read_token(cfg)
        if token:
            interceptors.append(AuthInterceptor(token))
        interceptors.append(ServiceInterceptor())
        self.server = grpc.aio.server(
            interceptors=interceptors,
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.so_reuseport", 0),
            ],
        )
        add_service(
            self.server, self.memory, memory_pb2.DESCRIPTOR.services_by_name["MemoryService"]
        )
        add_service(
            self.server,
            self.contexts,
            context_pb2.DESCRIPTOR.services_by_name["ContextService"],
            raw_replies=("GetContext",),
        )
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection(
            (*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), self.server
        )
        self.address = self._bind(cfg.listen, server_credentials(cfg))
        if cfg.metrics_listen:
            metrics.serve(cfg.metrics_listen)
        await self.domain.start()
        await self.server.start()
        for name in ("", *SERVICE_NAMES):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        self._store_ok = True
        self._probe = asyncio.create_task(self._watch_store(), name="store-probe")
        log.info(
            "serving",
            extra={
                "address": self.address,
                "store": self.storage.store.describe(),
                "instance": cfg.instance,
            },
        )
        return self.address

    async def _watch_store(self) -> None:
        """Probe the store; its services are NOT_SERVING while it fails.

        Overall health ("") stays SERVING so a liveness probe does not restart
        a pod whose only problem is the store; readiness should check a
        service name (e.g. ``ctxd.v1.ContextService``).
        """
        interval = self.config.store_probe_interval
        if interval <= 0:
            return
        while not self._stopped.is_set():
            await asyncio.sleep(interval)
            try:
                await asyncio.wait_for(self.storage.get("health/probe"), timeout=max(interval, 1.0))
                ok = True
            except (CtxdError, TimeoutError):
                ok = False
            if ok != self._store_ok and not self._stopped.is_set():
                self._store_ok = ok
                state = (
                    health_pb2.HealthCheckResponse.SERVING
                    if ok
                    else health_pb2.HealthCheckResponse.NOT_SERVING
                )
                for name in SERVICE_NAMES:
                    await self.health.set(name, state)
                if ok:
                    log.info("store recovered")
                else:
                    log.warning("store unavailable; services NOT_SERVING until it recovers")

    def _bind(self, listen: str, credentials: grpc.ServerCredentials | None) -> str:
        try:
            if credentials is None:
                port = self.server.add_insecure_port(listen)
            else:
                port = self.server.add_secure_port(listen, credentials)
        except RuntimeError:
            port = 0
        if listen.startswith("unix:"):
            return listen
        if not port:
            raise OSError(f"cannot listen on {listen}")
        host = listen.rsplit(":", 1)[0]
        return f"{host}:{port}"

    async def stop(self, grace: float | None = None) -> None:
        """Drain and shut down: NOT_SERVING, finish in-flight calls, flush the store."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        grace = self.config.grace_seconds if grace is None else grace
        log.info("shutting down", extra={"grace_seconds": grace})
        await self.health.enter_graceful_shutdown()
        if getattr(self, "_probe", None) is not None:
            self._probe.cancel()
        if self.server is not None:
            await self.server.stop(grace)
        await self.domain.stop()
        log.info("stopped")

    async def wait_stopped(self) -> None:
        await self._stopped.wait()


def read_token(cfg: Config) -> str:
    """The bearer token from ``auth_token_file`` (preferred) or ``auth_token``."""
    if cfg.auth_token_file:
        try:
            with open(cfg.auth_token_file, encoding="utf-8") as fh:
                token = fh.read().strip()
        except OSError:
            raise ValueError("cannot read auth_token_file") from None
        if not token:
            raise ValueError("auth_token_file is empty")
        return token
    return cfg.auth_token


def server_credentials(cfg: Config) -> grpc.ServerCredentials | None:
    """TLS (and mTLS when a client CA is configured), or None for plaintext."""
    if not cfg.tls_cert_file:
        return None

    def read(path: str, what: str) -> bytes:
        try:
            with open(path, "rb") as fh:
                return fh.read()
        except OSError:
            raise ValueError(f"cannot read {what}") from None

    key = read(cfg.tls_key_file, "tls_key_file")
    cert = read(cfg.tls_cert_file, "tls_cert_file")
    ca = read(cfg.tls_client_ca_file, "tls_client_ca_file") if cfg.tls_client_ca_file else None
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=ca, require_client_auth=ca is not None
    )


async def run(config: Config) -> int:
    """Serve until SIGTERM/SIGINT, then drain and return the exit code."""
    sidecar = Sidecar(config)
    await sidecar.start()
    loop = asyncio.get_running_loop()
    stop_requested = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop_requested.set)
    await stop_requested.wait()
    await sidecar.stop()
    return 0
