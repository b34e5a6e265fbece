"""The sidecar process: gRPC server, health, reflection, graceful shutdown."""

from __future__ import annotations

import asyncio
import errno
import gc
import logging
import os
import signal
import socket
import stat
import time
from collections.abc import Callable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc

from ctxd_sidecar.api.ctxd.v1 import context_pb2, memory_pb2
from ctxd_sidecar.config import Config
from ctxd_sidecar.plugin.manager import plugin_manager
from ctxd_sidecar.plugin.store import StoreError
from ctxd_sidecar.server import composition, metrics
from ctxd_sidecar.server.exposure import exposure_warning
from ctxd_sidecar.server.layers import (
    HEALTH_WATCH,
    WATCH_CONTEXT,
    Auth,
    Calls,
    Decode,
    Gate,
    Layer,
    Pipeline,
    Registrar,
    TokenFile,
)
from ctxd_sidecar.server.probe import StoreProbe
from ctxd_sidecar.server.registration import add_service

log = logging.getLogger(__name__)

SERVICE_NAMES = (
    context_pb2.DESCRIPTOR.services_by_name["ContextService"].full_name,
    memory_pb2.DESCRIPTOR.services_by_name["MemoryService"].full_name,
)

#: gRPC's own limit on one message; bigger requests fail with RESOURCE_EXHAUSTED.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
#: Seconds open streams get, after health turns NOT_SERVING, to send it and end.
STREAM_SETTLE = 0.05


class StartupError(Exception):
    """Start-up cannot go on; the message is one line for the operator."""


class Sidecar:
    """One running ctxd: start it, wait for a stop signal, stop it."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.server: grpc.aio.Server | None = None
        self.health = health.aio.HealthServicer()
        self.address: str | None = None
        self._metrics: metrics.Endpoint | None = None
        self._stopped = asyncio.Event()

    async def start(self) -> str:
        """Check, bind, open the store and start serving; return the bound address.

        In phases, as uvicorn's server starts: :meth:`_check` refuses what
        needs no store (token and TLS files, the listen and metrics
        addresses), so a sidecar that cannot serve never opens, and never
        writes to, a store another sidecar may be serving, and its refusal is
        the only line it prints; :meth:`_open` holds the port from then on
        (callers that connect while the store opens wait instead of being
        refused) and builds the domain; :meth:`_register` puts the services
        behind the layers; :meth:`_serve` starts them and says so.
        """
        token, credentials = self._check()
        # The admission gate comes first: the domain's storage asks it
        # whether a write may run on the event loop.
        self.gate = Gate(
            {
                WATCH_CONTEXT: ("max_watch_streams", self.config.max_watch_streams),
                HEALTH_WATCH: ("max_health_watch_streams", self.config.max_health_watch_streams),
            }
        )
        await self._open(credentials)
        self._register(token)
        await self._serve(token=bool(token), tls=credentials is not None)
        return self.address

    def _check(self) -> tuple[str, grpc.ServerCredentials | None]:
        cfg = self.config
        check_address(cfg.listen, "listen")
        if cfg.metrics_listen:
            check_address(cfg.metrics_listen, "metrics_listen")
        return read_token(cfg), server_credentials(cfg)

    async def _open(self, credentials: grpc.ServerCredentials | None) -> None:
        cfg = self.config
        self.server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.so_reuseport", 0),
            ],
        )
        try:
            self.address = self._bind(cfg.listen, credentials)
            if cfg.metrics_listen:
                try:
                    self._metrics = metrics.serve(cfg.metrics_listen)
                except OSError as exc:
                    raise StartupError(
                        f"cannot listen on {cfg.metrics_listen} (metrics_listen): {_reason(exc)}"
                    ) from None
            self.domain = await open_domain(cfg, idle=self.gate.alone)
        except BaseException:
            await self._unbind()
            raise
        self.storage = self.domain.storage
        self.contexts, self.memory = composition.servicers(self.domain)

    def _register(self, token: str) -> None:
        """Every service through the pipeline of layers (server/layers/)."""
        layers = _layers(self.config, token, self.domain.tracing, self.gate)
        registrar = Registrar(self.server, Pipeline(layers))
        add_service(registrar, self.memory, memory_pb2.DESCRIPTOR.services_by_name["MemoryService"])
        add_service(
            registrar,
            self.contexts,
            context_pb2.DESCRIPTOR.services_by_name["ContextService"],
            raw_replies=("GetContext", "AppendTurn"),
        )
        health_pb2_grpc.add_HealthServicer_to_server(self.health, registrar)
        reflection_pb2_grpc.add_ServerReflectionServicer_to_server(
            reflection.aio.ReflectionServicer(
                (*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME)
            ),
            registrar,
        )

    async def _serve(self, *, token: bool, tls: bool) -> None:
        cfg = self.config
        await self.domain.start()
        await self.server.start()
        for name in ("", *SERVICE_NAMES):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        probe = StoreProbe(
            self.storage, self.health, SERVICE_NAMES, cfg.store_probe_interval, self._stopped
        )
        self._probe = asyncio.create_task(probe.run(), name="store-probe")
        warning = exposure_warning(cfg.listen, token=token, tls=tls)
        if warning:
            log.warning(warning)
        log.info(
            "serving",
            extra={
                "address": self.address,
                "store": self.storage.store.describe(),
                "instance": cfg.instance,
            },
        )

    def _bind(self, listen: str, credentials: grpc.ServerCredentials | None) -> str:
        # gRPC only says "cannot bind", never why; a socket of our own says why.
        if listen.startswith("unix:"):
            probe_unix(listen)
        else:
            probe_bind(listen)
        try:
            if credentials is None:
                port = self.server.add_insecure_port(listen)
            else:
                port = self.server.add_secure_port(listen, credentials)
        except RuntimeError:
            port = 0
        if not port:
            raise StartupError(f"cannot listen on {listen}")
        if listen.startswith("unix:"):
            return listen
        host = listen.rsplit(":", 1)[0]
        return f"{host}:{port}"

    async def _unbind(self) -> None:
        """Release the ports of a start that failed (an in-process caller may retry)."""
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None
        if self.server is not None:
            # gRPC frees a bound port only when a started server stops; with
            # no services registered yet, any call that slips in is refused.
            await self.server.start()
            await self.server.stop(None)

    async def stop(self, grace: float | None = None) -> None:
        """Drain and shut down: refuse new calls, NOT_SERVING, end streams with
        UNAVAILABLE, let unary calls in flight finish (up to ``grace``), then
        stop the domain and flush the store.

        ctxd waits for its calls itself: ``server.stop(grace)`` would cancel
        whatever is still running when grace ends, and would hold the exit
        for the whole grace while any stream is open.
        """
        if self._stopped.is_set():
            return
        self._stopped.set()
        started = time.monotonic()
        grace = self.config.grace_seconds if grace is None else grace
        self.gate.begin_stop()
        log.info("shutting down", extra={"grace_seconds": grace, "in_flight": self.gate.in_flight})
        await self.health.enter_graceful_shutdown()
        if getattr(self, "_probe", None) is not None:
            self._probe.cancel()
        self.domain.contexts.feed.close()  # WatchContext streams end with UNAVAILABLE
        await asyncio.sleep(STREAM_SETTLE)
        self.gate.end_streams()  # and every other stream (Health.Watch)
        left = await self.gate.drain(grace)
        if left:
            log.warning("grace period over; calls still in flight", extra={"in_flight": left})
        if self.server is not None:
            await self.server.stop(0.5 if not left else 0)
        await self.domain.stop()
        if self._metrics is not None:
            self._metrics.close()
        log.info("stopped", extra={"seconds": round(time.monotonic() - started, 3)})

    async def wait_stopped(self) -> None:
        await self._stopped.wait()


async def open_domain(cfg: Config, *, idle: Callable[[], bool] | None = None) -> composition.Domain:
    """Build the domain; a store that cannot be opened is one line, not a traceback."""
    try:
        return await composition.build(cfg, plugin_manager(), idle=idle)
    except (StoreError, OSError) as exc:
        scheme = cfg.store.partition(":")[0] or "store"
        raise StartupError(f"cannot open the {scheme} store: {_reason(exc)}") from None


def _reason(exc: BaseException) -> str:
    """The OS reason of an error (``strerror``), or its own message.

    A store error that names only the type of what it caught (the LMDB
    plugin's "cannot open LMDB environment: Error") gets that error's reason
    instead, without the path the library puts before it.
    """
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    text = str(exc) or type(exc).__name__
    caught = exc.__cause__ or exc.__context__
    if isinstance(exc, StoreError) and caught is not None:
        name = type(caught).__name__
        reason = _reason(caught).rsplit(": ", 1)[-1].strip()
        if text.endswith(f": {name}") and reason and reason != name:
            text = f"{text[: -len(name)]}{reason}"
    return text


def check_address(listen: str, setting: str) -> None:
    """``host:port`` with a port in range (gRPC would quietly wrap 99999)."""
    if listen.startswith("unix:"):
        return
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise StartupError(f"{setting} must be host:port or unix:PATH, got {listen!r}")
    if not 0 <= int(port) <= 65535:
        raise StartupError(f"{setting}: port {port} is out of range (0-65535)")


def probe_bind(listen: str) -> None:
    """Bind ``listen`` once ourselves, so a refusal carries the OS reason."""
    host, _, port = listen.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    if port == "0":
        return
    try:
        infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise StartupError(f"cannot listen on {listen}: {exc.strerror}") from None
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(addr)
        except OSError as exc:
            reason = exc.strerror or os.strerror(exc.errno or errno.EINVAL)
            raise StartupError(f"cannot listen on {listen}: {reason}") from None


def probe_unix(listen: str) -> None:
    """Bind the socket path of ``unix:PATH`` once ourselves: gRPC reports
    nothing when it cannot (a missing or read-only directory), and would log
    "serving" with nothing listening. A path that is already there is left to
    gRPC, which replaces a stale socket."""
    path = listen[len("unix:") :]
    if path.startswith("//"):  # unix:///abs/path
        path = path[2:]
    if os.path.lexists(path):
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise StartupError(f"cannot listen on {listen}: the path exists and is not a socket")
        return
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(path)
        except OSError as exc:
            raise StartupError(f"cannot listen on {listen}: {_reason(exc)}") from None
    os.unlink(path)


def _layers(cfg: Config, token: str | None, tracing, gate: Gate) -> list[Layer]:
    """The layers every call passes, outermost first: metrics, access log and
    error mapping see every call, refusals included; the token is checked
    before the gate, and requests are decoded last, right before the handler."""
    access = cfg.access_log_level
    layers: list[Layer] = [
        Calls(None if access == "OFF" else logging.getLevelName(access), tracing)
    ]
    if token:
        # A token file is followed: a rotated token is taken without a restart.
        auth = (
            TokenFile(cfg.auth_token_file, token, cfg.auth_token_grace)
            if cfg.auth_token_file
            else token
        )
        layers.append(Auth(auth))
    return [*layers, gate, Decode()]


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


def settle_heap() -> None:
    """Exempt what start-up built (modules, the domain, the server) from the
    garbage collector's later full passes. A restore builds one object per
    message, enough to set off a full pass, which would otherwise rescan all
    of start-up's objects too (a third of a fresh process's restore of a
    10,000-message context). Once per process, after start-up."""
    gc.collect()
    gc.freeze()


async def run(config: Config) -> int:
    """Serve until SIGTERM/SIGINT, then drain and return the exit code."""
    sidecar = Sidecar(config)
    await sidecar.start()
    settle_heap()
    loop = asyncio.get_running_loop()
    stop_requested = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop_requested.set)
    await stop_requested.wait()
    await sidecar.stop()
    return 0
