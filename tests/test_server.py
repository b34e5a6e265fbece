"""The sidecar process: health, reflection, shutdown, config errors."""

from __future__ import annotations

import subprocess
import sys
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from tests.conftest import free_port, wait_serving


def test_serves_health_within_two_seconds_and_stops_on_sigterm(spawn_sidecar, tmp_path):
    started = time.monotonic()
    sc = spawn_sidecar("--store", f"lmdb://{tmp_path / 'data'}")
    assert (
        time.monotonic() - started < 2.0 + 1.0
    )  # interpreter start included; bench measures precisely
    r = sc.running()
    for service in ("", "ctxd.v1.ContextService", "ctxd.v1.MemoryService"):
        resp = r.health.Check(health_pb2.HealthCheckRequest(service=service))
        assert resp.status == health_pb2.HealthCheckResponse.SERVING
    assert sc.terminate() == 0
    log = sc.stderr()
    assert '"message": "stopped"' in log


def test_reflection_lists_every_service(sidecar):
    stub = reflection_pb2_grpc.ServerReflectionStub(sidecar.channel)
    reqs = iter([reflection_pb2.ServerReflectionRequest(list_services="")])
    services = {
        s.name
        for resp in stub.ServerReflectionInfo(reqs)
        for s in resp.list_services_response.service
    }
    assert {
        "ctxd.v1.ContextService",
        "ctxd.v1.MemoryService",
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
    } <= services


def test_unix_socket(tmp_path):
    sock = tmp_path / "ctxd.sock"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sidecar",
            "serve",
            "--listen",
            f"unix:{sock}",
            "--store",
            "memory://",
        ],
        stderr=subprocess.PIPE,
    )
    try:
        channel = grpc.insecure_channel(f"unix:{sock}")
        wait_serving(channel, 15, proc)
        channel.close()
    finally:
        proc.terminate()
        assert proc.wait(20) == 0


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--store", "nosuch://x"], "no store plugin serves scheme 'nosuch'"),
        (["--set", "contexts.compact_at=1.5"], "compact_at must be in (0, 1]"),
        (["--set", "memory.max_keys=lots"], "is not a valid int"),
        (["--set", "bogus.setting=1"], "unknown setting 'bogus'"),
    ],
)
def test_bad_configuration_is_a_clear_error(args, needle):
    port = free_port()
    proc = subprocess.run(
        [sys.executable, "-m", "sidecar", "serve", "--listen", f"127.0.0.1:{port}", *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr


def test_config_precedence_flags_over_env_over_file(tmp_path):
    from sidecar import config

    f = tmp_path / "ctxd.toml"
    f.write_text('listen = "127.0.0.1:1"\ninstance = "from-file"\n[memory]\nmax_keys = 7\n')
    cfg = config.load(
        config_file=str(f),
        env={"CTXD_INSTANCE": "from-env", "CTXD_MEMORY_MAX_KEYS": "8"},
        overrides={"instance": "from-flag"},
    )
    assert (cfg.listen, cfg.instance, cfg.memory.max_keys) == ("127.0.0.1:1", "from-flag", 8)
