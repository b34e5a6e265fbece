"""Shared fixtures: a real moto S3 server, store URIs for every backend, and
ctxd sidecars (in-process on a background event loop, or as a subprocess
that can be killed)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import boto3
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ctxd_sidecar import config as config_mod
from ctxd_sidecar.api.ctxd.v1 import context_pb2_grpc, memory_pb2_grpc
from ctxd_sidecar.config.loader import load_config
from ctxd_sidecar.server.app import Sidecar

os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
for _proxy in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
    os.environ.pop(_proxy, None)

BACKENDS = ["memory", "lmdb", "s3", "s3-nolist"]
DURABLE_BACKENDS = ["lmdb", "s3", "s3-nolist"]


# -- S3 ---------------------------------------------------------------------------
def _conditional_writes_atomic() -> None:
    """moto (5.x) checks If-Match / If-None-Match and then writes, with no lock
    between: two racing conditional PUTs on one key can both win, which S3
    never allows, and a replica test then "loses" an update that ctxd's
    compare-and-set did not lose. Object writes and deletes are serialised so
    the test server is as strict as the real one."""
    from moto.s3.responses import S3Response

    lock = threading.Lock()
    for name in ("put_object", "delete_object"):
        original = getattr(S3Response, name)

        def serialised(self, _original=original):
            with lock:
                return _original(self)

        setattr(S3Response, name, serialised)


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """moto in server mode: real HTTP on loopback, shared by the session."""
    from moto.server import ThreadedMotoServer

    _conditional_writes_atomic()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3_bucket(moto_endpoint) -> str:
    name = f"ctxd-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1").create_bucket(
        Bucket=name
    )
    return name


def s3_uri(endpoint: str, bucket: str, *, can_list: bool = True, prefix: str = "pfx") -> str:
    flag = "true" if can_list else "false"
    return f"s3://{bucket}/{prefix}?endpoint_url={endpoint}&region=us-east-1&list={flag}&max_attempts=2"


@pytest.fixture
def store_uri_for(tmp_path, moto_endpoint):
    """Factory: backend name -> a fresh store URI for that backend."""

    def make(backend: str) -> str:
        if backend == "memory":
            return "memory://"
        if backend == "lmdb":
            return f"lmdb://{tmp_path / f'lmdb-{uuid.uuid4().hex[:6]}'}?map_size=256MiB"
        if backend in {"s3", "s3-nolist"}:
            bucket = f"ctxd-{uuid.uuid4().hex[:12]}"
            boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1").create_bucket(
                Bucket=bucket
            )
            return s3_uri(moto_endpoint, bucket, can_list=backend == "s3")
        raise ValueError(backend)

    return make


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture
def store_uri(backend, store_uri_for) -> str:
    return store_uri_for(backend)


# -- sidecars ---------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Running:
    """A running sidecar and stubs on one channel to it."""

    address: str
    channel: grpc.Channel
    stop: object = None
    extra: dict = field(default_factory=dict)

    @property
    def memory(self) -> memory_pb2_grpc.MemoryServiceStub:
        return memory_pb2_grpc.MemoryServiceStub(self.channel)

    @property
    def contexts(self) -> context_pb2_grpc.ContextServiceStub:
        return context_pb2_grpc.ContextServiceStub(self.channel)

    @property
    def health(self) -> health_pb2_grpc.HealthStub:
        return health_pb2_grpc.HealthStub(self.channel)


class InProcessSidecar:
    """A real sidecar on its own event loop thread, in this process."""

    def __init__(self, cfg: config_mod.Config) -> None:
        self.cfg = cfg
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.sidecar = Sidecar(cfg)
        self.address = self._call(self.sidecar.start())
        self.channel = grpc.insecure_channel(self.address)

    def _call(self, coro, timeout: float = 30):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, coro, timeout: float = 30):
        """Run a coroutine on the sidecar's loop (e.g. to reach the domain core)."""
        return self._call(coro, timeout)

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.channel.close()
        try:
            self._call(self.sidecar.stop(grace=1))
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)
            self.loop.close()

    def running(self) -> Running:
        return Running(self.address, self.channel, self.close, {"sidecar": self.sidecar})


@pytest.fixture
def start_sidecar():
    """Factory: start in-process sidecars with a store URI and settings;
    all are stopped at teardown. ``settings`` are dotted config names."""
    started: list[InProcessSidecar] = []

    def start(store: str, **settings) -> Running:
        overrides = {
            "store": store,
            "listen": "127.0.0.1:0",
            **{k.replace("__", "."): v for k, v in settings.items()},
        }
        cfg = load_config(env={}, overrides=overrides)
        sc = InProcessSidecar(cfg)
        started.append(sc)
        r = sc.running()
        r.extra["handle"] = sc
        return r

    yield start
    for sc in reversed(started):
        try:
            sc.close()
        except Exception:  # noqa: BLE001 - already stopped by the test
            pass


@pytest.fixture
def sidecar(start_sidecar, store_uri) -> Running:
    """A sidecar on each backend (parametrised through ``backend``)."""
    return start_sidecar(store_uri)


#: Channel options for clients of a sidecar that is starting or restarting.
#: gRPC's default reconnect backoff waits about 1 s after a refused connect
#: (then 1.6x longer each time), so a channel opened before the sidecar
#: listens would time the backoff, not the sidecar.
FAST_RECONNECT = (
    ("grpc.initial_reconnect_backoff_ms", 10),
    ("grpc.min_reconnect_backoff_ms", 10),
    ("grpc.max_reconnect_backoff_ms", 100),
)


class SidecarProcess:
    """``ctxd serve`` as a child process: kill -9 it, restart it."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.args = args
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen | None = None
        self.channel: grpc.Channel | None = None

    def start(self, timeout: float = 15) -> SidecarProcess:
        cmd = [sys.executable, "-m", "ctxd_sidecar", "serve", "--listen", self.address, *self.args]
        self.proc = subprocess.Popen(
            cmd, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        self.channel = grpc.insecure_channel(self.address, options=FAST_RECONNECT)
        wait_serving(self.channel, timeout, self.proc)
        return self

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        if self.channel:
            self.channel.close()

    def terminate(self, timeout: float = 20) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        if self.channel:
            self.channel.close()
        return code

    def stderr(self) -> str:
        assert self.proc is not None
        if self.proc.poll() is None:
            return ""
        return self.proc.stderr.read().decode(errors="replace")

    def running(self) -> Running:
        return Running(self.address, self.channel, self.kill)


def wait_serving(
    channel: grpc.Channel, timeout: float, proc: subprocess.Popen | None = None
) -> None:
    deadline = time.monotonic() + timeout
    stub = health_pb2_grpc.HealthStub(channel)
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(
                f"sidecar exited with {proc.returncode}: {proc.stderr.read().decode()[-2000:]}"
            )
        try:
            if (
                stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status
                == health_pb2.HealthCheckResponse.SERVING
            ):
                return
        except grpc.RpcError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError("sidecar did not become SERVING")
        time.sleep(0.01)


@pytest.fixture
def spawn_sidecar():
    """Factory: ``ctxd serve`` subprocesses; killed at teardown."""
    procs: list[SidecarProcess] = []

    def spawn(*args: str, env: dict[str, str] | None = None) -> SidecarProcess:
        sp = SidecarProcess(list(args), env)
        procs.append(sp)
        return sp.start()

    yield spawn
    for sp in procs:
        sp.kill()
