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
from pathlib import Path

import boto3
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import settings

from ctxd_sidecar import config as config_mod
from ctxd_sidecar.api.ctxd.v1 import context_pb2_grpc, memory_pb2_grpc
from ctxd_sidecar.config.loader import load_config
from ctxd_sidecar.server.app import Sidecar
from tests.support import pg_server as pg

os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
for _proxy in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
    os.environ.pop(_proxy, None)

#: CI runs the property tests on a fixed seed (HYPOTHESIS_PROFILE=ci, set by
#: .ci/run), so what lands was checked on exactly the examples CI checks; a
#: developer's run draws new examples each time and so keeps exploring.
settings.register_profile("ci", derandomize=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

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


def new_store_uri(backend: str, directory: Path, moto_endpoint: str) -> str:
    """A fresh store URI for a backend (LMDB under ``directory``, S3 a new bucket)."""
    if backend == "memory":
        return "memory://"
    if backend == "lmdb":
        return f"lmdb://{directory / f'lmdb-{uuid.uuid4().hex[:6]}'}?map_size=256MiB"
    if backend in {"s3", "s3-nolist"}:
        bucket = f"ctxd-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1").create_bucket(
            Bucket=bucket
        )
        return s3_uri(moto_endpoint, bucket, can_list=backend == "s3")
    raise ValueError(backend)


# -- PostgreSQL ---------------------------------------------------------------------
@pytest.fixture(scope="session")
def pg_server() -> Iterator[pg.PgServer]:
    """A real PostgreSQL for the session (see tests/support/pg_server.py)."""
    reason = pg.unavailable_reason()
    if reason:
        pytest.skip(reason)
    server = pg.launch()
    yield server
    pg.cleanup(server)


@pytest.fixture
def pg_uri(pg_server) -> str:
    """A postgres:// store URI, empty: a fresh schema of its own."""
    return pg_server.fresh_store_uri()


@pytest.fixture
def store_uri_for(tmp_path, moto_endpoint, request):
    """Factory: backend name -> a fresh store URI for that backend."""

    def make(backend: str) -> str:
        if backend == "postgres":
            return request.getfixturevalue("pg_server").fresh_store_uri()
        return new_store_uri(backend, tmp_path, moto_endpoint)

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
    yield _sidecar_factory(started)
    _stop_all(started)


def _sidecar_factory(started: list[InProcessSidecar]):
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

    return start


def _stop_all(started: list[InProcessSidecar]) -> None:
    for sc in reversed(started):
        try:
            sc.close()
        except Exception:  # noqa: BLE001 - already stopped by the test
            pass


@pytest.fixture(scope="module")
def start_module_sidecar(tmp_path_factory, moto_endpoint):
    """Factory: one in-process sidecar shared by a module's tests (per backend),
    for tests whose cases each use fresh ids, so they need no sidecar each.
    ``start_module_sidecar("lmdb", **settings)``, or a store URI built on
    ``directory`` (``lambda d: f"lmdb://{d}/x"``); stopped after the module."""
    started: list[InProcessSidecar] = []
    start = _sidecar_factory(started)
    directory = tmp_path_factory.mktemp("module-sidecar")

    def start_backend(backend, **settings) -> Running:
        uri = backend(directory) if callable(backend) else None
        running = start(uri or new_store_uri(backend, directory, moto_endpoint), **settings)
        running.extra["dir"] = directory
        return running

    yield start_backend
    _stop_all(started)


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


# -- parallel runs ------------------------------------------------------------------------
#: Modules that kill, load or drain sidecars on a schedule: under pytest-xdist
#: (scripts/test.sh runs ``-n 4 --dist loadgroup``) they share one worker and run
#: one after another, so they never compete with each other for the cores.
TIMING_SENSITIVE = {
    "test_crash_contexts",
    "test_crash_forks",
    "test_reliability_crash_compaction",
    "test_reliability_crash_memory",
    "test_reliability_crash_plan",
    "test_load_drain",
    "test_drain",
}


#: Store variants of RPC-level tests that repeat, on moto's S3, what another
#: variant of the same test and the store conformance suite already prove:
#: they run in the slow set (``scripts/test.sh slow``) so the default set stays
#: quick. Each entry is a test node id below ``tests/``.
SLOW_VARIANTS = {
    # S3 paging is the conformance suite's test_list_spans_more_than_one_page_of_results;
    # the key index over many keys is tests/memory/test_keyindex_pages.py.
    "memory/test_memory.py::test_pagination_over_more_than_a_thousand_keys[s3-nolist]",
    # Checkpoints and replay on S3 stay in the default set with listing on.
    "contexts/test_contexts_durability.py::test_many_turns_checkpoint_and_replay[s3-nolist]",
    # The two chains kept by default go LMDB -> S3 -> PostgreSQL -> LMDB and
    # LMDB -> S3 without LIST -> memory -> LMDB; these two add the other directions.
    "ops/test_migrate.py::test_migrate_lmdb_to_s3_and_back[lmdb-s3-lmdb]",
    "ops/test_migrate.py::test_migrate_lmdb_to_s3_and_back[lmdb-postgres-s3-lmdb]",
    # --overwrite on S3 stays in the default set without LIST.
    "ops/test_migrate.py::test_overwrite_replaces_a_context_that_took_more_turns_whole[s3]",
}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        if item.nodeid.removeprefix("tests/") in SLOW_VARIANTS:
            item.add_marker(pytest.mark.slow)
        if item.module is not None and item.module.__name__.rpartition(".")[2] in TIMING_SENSITIVE:
            item.add_marker(pytest.mark.xdist_group("timing"))
