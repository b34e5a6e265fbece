"""The sidecar process: health, reflection, shutdown, config errors."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import types

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_status import rpc_status

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as cpb
from ctxd_sidecar.api.ctxd.v1 import memory_pb2
from ctxd_sidecar.server.layers import HEALTH_WATCH, WATCH_CONTEXT, Pipeline, Registrar
from ctxd_sidecar.server.layers.decode import _names_context
from ctxd_sidecar.server.registration import add_service
from tests.conftest import FAST_RECONNECT, free_port, wait_serving


def test_serves_health_and_stops_on_sigterm(spawn_sidecar, tmp_path):
    # How fast it starts is a figure for bench/, not an assertion here.
    sc = spawn_sidecar("--store", f"lmdb://{tmp_path / 'data'}")
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
            "ctxd_sidecar",
            "serve",
            "--listen",
            f"unix:{sock}",
            "--store",
            "memory://",
        ],
        stderr=subprocess.PIPE,
    )
    try:
        channel = grpc.insecure_channel(f"unix:{sock}", options=FAST_RECONNECT)
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
        (["--set", "memory.max_keys=lots"], "must be a whole number"),
        (["--set", "bogus.setting=1"], "unknown setting 'bogus'"),
    ],
)
def test_bad_configuration_is_a_clear_error(args, needle):
    port = free_port()
    proc = subprocess.run(
        [sys.executable, "-m", "ctxd_sidecar", "serve", "--listen", f"127.0.0.1:{port}", *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr


def test_config_precedence_flags_over_env_over_file(tmp_path):
    from ctxd_sidecar.config.loader import load_config

    f = tmp_path / "ctxd.toml"
    f.write_text('listen = "127.0.0.1:1"\ninstance = "from-file"\n[memory]\nmax_keys = 7\n')
    cfg = load_config(
        config_file=str(f),
        env={"CTXD_INSTANCE": "from-env", "CTXD_MEMORY_MAX_KEYS": "8"},
        overrides={"instance": "from-flag"},
    )
    assert (cfg.listen, cfg.instance, cfg.memory.max_keys) == ("127.0.0.1:1", "from-flag", 8)


# -- stream caps ---------------------------------------------------------------------------------
def _wait_open(sc, method: str, n: int) -> None:
    gate = sc.extra["sidecar"].gate
    deadline = time.monotonic() + 10
    while gate.open_streams(method) != n:
        assert time.monotonic() < deadline, f"{gate.open_streams(method)} streams open, not {n}"
        time.sleep(0.01)


def _quota(err: grpc.RpcError) -> error_details_pb2.QuotaFailure:
    st = rpc_status.from_call(err)
    for detail in st.details:
        if detail.Is(error_details_pb2.QuotaFailure.DESCRIPTOR):
            out = error_details_pb2.QuotaFailure()
            detail.Unpack(out)
            return out
    raise AssertionError("no QuotaFailure detail")


def test_watch_streams_are_capped_with_a_quota_failure(start_sidecar):
    sc = start_sidecar("memory://", max_watch_streams=2)
    sc.contexts.AppendTurn(
        cpb.AppendTurnRequest(
            context_id="w", messages=[cpb.Message(user=cpb.UserMessage(text="x"))]
        )
    )
    open_ = [sc.contexts.WatchContext(cpb.WatchContextRequest(context_id="w")) for _ in range(2)]
    _wait_open(sc, WATCH_CONTEXT, 2)
    third = sc.contexts.WatchContext(cpb.WatchContextRequest(context_id="w"), timeout=10)
    with pytest.raises(grpc.RpcError) as err:
        next(third)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    (violation,) = _quota(err.value).violations
    assert violation.subject == "max_watch_streams"
    # A slot comes back when a watcher leaves.
    open_[0].cancel()
    _wait_open(sc, WATCH_CONTEXT, 1)
    again = sc.contexts.WatchContext(cpb.WatchContextRequest(context_id="w"))
    _wait_open(sc, WATCH_CONTEXT, 2)
    for call in (open_[1], again):
        call.cancel()


def test_health_watch_needs_no_token_but_is_capped(start_sidecar):
    sc = start_sidecar("memory://", auth_token="t0ken", max_health_watch_streams=1)
    first = sc.health.Watch(health_pb2.HealthCheckRequest())
    assert next(first).status == health_pb2.HealthCheckResponse.SERVING
    second = sc.health.Watch(health_pb2.HealthCheckRequest(), timeout=10)
    with pytest.raises(grpc.RpcError) as err:
        next(second)
        next(second)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert _quota(err.value).violations[0].subject == "max_health_watch_streams"
    first.cancel()
    _wait_open(sc, HEALTH_WATCH, 0)
    third = sc.health.Watch(health_pb2.HealthCheckRequest())
    assert next(third).status == health_pb2.HealthCheckResponse.SERVING
    third.cancel()


def test_a_stop_ends_health_watch_with_not_serving_then_unavailable(start_sidecar):
    sc = start_sidecar("memory://")
    watch = sc.health.Watch(health_pb2.HealthCheckRequest(), timeout=30)
    assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
    handle = sc.extra["handle"]
    handle.call(handle.sidecar.stop(grace=5))
    seen = []
    with pytest.raises(grpc.RpcError) as err:
        for resp in watch:
            seen.append(resp.status)
    assert seen == [health_pb2.HealthCheckResponse.NOT_SERVING]
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "stopping" in err.value.details()


# -- start-up refusals ---------------------------------------------------------------------------
def _refused(*args: str) -> str:
    """Run ``ctxd serve`` that must refuse to start; all of its stderr."""
    proc = subprocess.run(
        [sys.executable, "-m", "ctxd_sidecar", "serve", *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.splitlines()  # the refusal alone, nothing logged before it
    assert line.startswith("ctxd: "), proc.stderr
    return line


def test_a_port_out_of_range_is_refused():
    line = _refused("--listen", "127.0.0.1:99999", "--store", "memory://")
    assert line == "ctxd: cannot start: listen: port 99999 is out of range (0-65535)"


def test_a_port_in_use_is_refused_with_the_os_reason():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        line = _refused("--listen", f"127.0.0.1:{port}", "--store", "memory://")
        assert (
            line == f"ctxd: cannot start: cannot listen on 127.0.0.1:{port}: Address already in use"
        )
        line = _refused(
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            f"127.0.0.1:{port}",
            "--store",
            "memory://",
        )
        assert "(metrics_listen): Address already in use" in line


def test_an_lmdb_directory_that_cannot_be_created_is_refused(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    line = _refused("--listen", "127.0.0.1:0", "--store", f"lmdb://{tmp_path / 'file' / 'data'}")
    assert line == "ctxd: cannot start: cannot open the lmdb store: Not a directory"


def test_services_reach_the_server_as_generic_handlers_only():
    """Per-method registration makes every grpc.aio call dearer with ctxd's
    many methods (see Registrar): every handler must come through the one
    generic path, wrapped by the pipeline."""

    class Recording:
        def __init__(self) -> None:
            self.generic: list = []
            self.registered: list = []

        def add_generic_rpc_handlers(self, handlers) -> None:
            self.generic.extend(handlers)

        def add_registered_method_handlers(self, service, handlers) -> None:
            self.registered.append(service)

    class Marking:
        def wrap(self, handler, method):
            return grpc.unary_unary_rpc_method_handler(lambda request, context: method)

    server = Recording()
    registrar = Registrar(server, Pipeline([Marking()]))
    service = memory_pb2.DESCRIPTOR.services_by_name["MemoryService"]
    servicer = types.SimpleNamespace(**{m.name: None for m in service.methods})
    add_service(registrar, servicer, service)
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), registrar)
    assert server.registered == []
    details = type("Details", (), {"method": "/ctxd.v1.MemoryService/Get"})()
    handler = next(h.service(details) for h in server.generic if h.service(details) is not None)
    assert handler.unary_unary(None, None) == "/ctxd.v1.MemoryService/Get"


def test_decode_reads_context_ids_only_from_requests_that_have_one():
    """The access line's context_id comes from the request; a message
    without the field is not asked on every call (an AttributeError each)."""
    assert _names_context(cpb.AppendTurnRequest.FromString)
    assert _names_context(cpb.GetContextRequest.FromString)
    assert not _names_context(memory_pb2.SetRequest.FromString)
    assert not _names_context(memory_pb2.GetRequest.FromString)
    assert _names_context(lambda raw: raw)  # cannot tell: asked at run time


def test_a_lone_write_commits_on_the_loop_and_concurrent_ones_group_commit(start_sidecar, tmp_path):
    """LMDB's transaction ids count commits. One caller at a time: one commit
    per Set, made on the event loop whenever nothing else is ready there.
    Sixteen callers at once: the writes queue to the writer thread and share
    commits (the gate must see the calls waiting, or every write would fsync
    alone on the loop).

    How many lone writes go inline depends on when gRPC's own callbacks land
    on the loop (20 of 20 here, 14 on a slower CI machine), so this checks
    that the server wires its gate to the storage at all; the rule itself
    (inline only while idle and not paused) is tests/stores/test_storage.py's."""
    import threading

    r = start_sidecar(f"lmdb://{tmp_path / 'data'}")
    store = r.extra["sidecar"].storage.store
    store.inline.budget = float("inf")  # a loaded CI disk must not pause them
    env = store.env

    def commits() -> int:
        return env.info()["last_txnid"]

    before, inline_before = commits(), store.inline.commits
    for i in range(20):
        r.memory.Set(memory_pb2.SetRequest(key=f"alone/{i}", value_json="1"), timeout=10)
    assert commits() - before == 20
    assert store.inline.commits > inline_before, "the server never told the store it was idle"

    def caller(n: int) -> None:
        for i in range(25):
            r.memory.Set(memory_pb2.SetRequest(key=f"many/{n}/{i}", value_json="1"), timeout=10)

    before = commits()
    threads = [threading.Thread(target=caller, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    listed = r.memory.List(memory_pb2.ListRequest(prefix="many/", limit=1000), timeout=10)
    assert len(listed.records) == 400
    assert commits() - before < 400 * 0.9, "concurrent writes were not group-committed"
