"""Logs: JSON lines with RFC 3339 UTC timestamps, one access line per RPC
(never a payload or a token), grpc's own output kept out of stderr, and no
traceback or source path in any line a real process writes at INFO and above."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys

import grpc
import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as cpb
from ctxd_sidecar.api.ctxd.v1 import context_pb2_grpc, memory_pb2_grpc
from ctxd_sidecar.api.ctxd.v1 import memory_pb2 as mpb
from ctxd_sidecar.server import logs
from tests.conftest import FAST_RECONNECT, free_port, wait_serving

TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
TOKEN = "s3cret-token-for-the-log-test"
SECRET_TEXT = "payload-that-must-never-be-logged"
#: What a traceback or a source location looks like in a line.
LEAKS = ("Traceback", "/site-packages/", "/ctxd_sidecar/", "/ctxd_plugins/", 'File "')


class Process:
    """``ctxd serve`` whose whole stderr is kept (read after it exits)."""

    def __init__(self, *args: str, env: dict[str, str] | None = None, serving: bool = True) -> None:
        self.address = f"127.0.0.1:{free_port()}"
        cmd = [sys.executable, "-m", "ctxd_sidecar", "serve", "--listen", self.address, *args]
        self.proc = subprocess.Popen(
            cmd,
            env={**os.environ, **(env or {})},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self.channel = grpc.insecure_channel(self.address, options=FAST_RECONNECT)
        if serving:
            wait_serving(self.channel, 30, self.proc)
        else:
            # A sidecar whose store is down answers, but its health probe turns
            # NOT_SERVING a few seconds in: on a loaded machine that can come
            # before the first health check does.
            grpc.channel_ready_future(self.channel).result(timeout=30)

    def stop(self) -> str:
        self.channel.close()
        self.proc.send_signal(signal.SIGTERM)
        _, err = self.proc.communicate(timeout=30)
        assert self.proc.returncode == 0
        return err.decode(errors="replace")


def _lines(stderr: str) -> list[dict]:
    out = []
    for line in stderr.splitlines():
        assert line.startswith("{"), f"not a JSON line: {line[:200]}"
        out.append(json.loads(line))
    return out


def _auth() -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {TOKEN}"),)


def _provoke(channel: grpc.Channel) -> None:
    """Calls that fail in different layers: validation, decoding, the store."""
    ctx = context_pb2_grpc.ContextServiceStub(channel)
    mem = memory_pb2_grpc.MemoryServiceStub(channel)
    ctx.AppendTurn(
        cpb.AppendTurnRequest(
            context_id="logged", messages=[cpb.Message(user=cpb.UserMessage(text=SECRET_TEXT))]
        ),
        metadata=_auth(),
        timeout=10,
    )
    failures = [
        lambda: ctx.GetContext(
            cpb.GetContextRequest(context_id="logged", view=77), metadata=_auth(), timeout=10
        ),
        lambda: ctx.GetContext(cpb.GetContextRequest(context_id="nope"), timeout=10),
        lambda: channel.unary_unary("/ctxd.v1.MemoryService/Get")(
            b"\xff\xff\xff", metadata=_auth(), timeout=10
        ),
    ]
    value = '"' + "v" * 60_000 + '"'
    for i in range(40):  # the 1 MiB map fills up: a store failure
        failures.append(
            lambda i=i: mem.Set(
                mpb.SetRequest(key=f"big/{i}", value_json=value), metadata=_auth(), timeout=10
            )
        )
    codes = set()
    for call in failures:
        try:
            call()
        except grpc.RpcError as exc:
            codes.add(exc.code())
    assert {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    } <= codes, codes


def test_a_real_process_logs_json_access_lines_and_no_tracebacks(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    sc = Process(
        "--store",
        f"lmdb://{tmp_path / 'data'}?map_size=1MiB",
        "--set",
        f"auth_token_file={token_file}",
    )
    _provoke(sc.channel)
    stderr = sc.stop()
    for leak in LEAKS:
        assert leak not in stderr, f"{leak!r} in the log"
    assert TOKEN not in stderr and SECRET_TEXT not in stderr
    lines = _lines(stderr)
    assert all(TS.match(line["ts"]) for line in lines), lines[0]["ts"]
    access = [line for line in lines if line["logger"] == "ctxd.access"]
    by_method = {}
    for line in access:
        assert set(line) >= {"service", "method", "code", "duration_ms"}, line
        assert isinstance(line["duration_ms"], float | int)
        by_method.setdefault(line["method"], []).append(line)
    turn = by_method["AppendTurn"][0]
    assert (turn["service"], turn["code"], turn["context_id"]) == (
        "ctxd.v1.ContextService",
        "OK",
        "logged",
    )
    assert {line["code"] for line in by_method["GetContext"]} == {
        "INVALID_ARGUMENT",
        "UNAUTHENTICATED",
    }
    assert "RESOURCE_EXHAUSTED" in {line["code"] for line in by_method["Set"]}
    assert by_method["Get"][0]["code"] == "INVALID_ARGUMENT"
    assert any(line["method"] == "Check" for line in access)  # health probes too
    # One line per RPC: 1 turn + 3 failures + 40 sets, plus health checks.
    ctxd = [line for line in access if line["service"].startswith("ctxd.")]
    assert len(ctxd) == 44, len(ctxd)


def test_an_unexpected_error_is_one_line_with_its_reference(tmp_path):
    """A context head of the wrong shape (written behind ctxd's back) fails
    inside the domain: the caller gets INTERNAL with a reference, the log one
    ERROR line with that reference and the error, no traceback."""
    import lmdb

    data = tmp_path / "data"
    sc = Process("--store", f"lmdb://{data}")
    context_pb2_grpc.ContextServiceStub(sc.channel).AppendTurn(
        cpb.AppendTurnRequest(
            context_id="bent", messages=[cpb.Message(user=cpb.UserMessage(text="x"))]
        ),
        timeout=10,
    )
    sc.stop()
    env = lmdb.open(str(data))
    with env.begin(write=True) as txn:
        txn.put(b"ctxd/default/contexts/bent", b'{"format": 1, "id": "bent", "kind": 7}')
    env.close()
    sc = Process("--store", f"lmdb://{data}")
    with pytest.raises(grpc.RpcError) as err:
        context_pb2_grpc.ContextServiceStub(sc.channel).GetContext(
            cpb.GetContextRequest(context_id="bent"), timeout=10
        )
    assert err.value.code() == grpc.StatusCode.INTERNAL
    ref = re.search(r"reference (\w+)", err.value.details()).group(1)
    stderr = sc.stop()
    for leak in LEAKS:
        assert leak not in stderr, f"{leak!r} in the log"
    (line,) = [line for line in _lines(stderr) if line["level"] == "ERROR"]
    assert line["reference"] == ref and line["error"], line


def test_a_store_that_is_down_logs_no_tracebacks(tmp_path):
    """S3 on a port nobody listens on: start-up counting and every call fail."""
    dead = f"http://127.0.0.1:{free_port()}"
    sc = Process(
        "--store",
        f"s3://bucket/p?endpoint_url={dead}&region=us-east-1&max_attempts=1&connect_timeout=0.2",
        env={"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y"},
        serving=False,
    )
    mem = memory_pb2_grpc.MemoryServiceStub(sc.channel)
    with pytest.raises(grpc.RpcError) as err:
        mem.Get(mpb.GetRequest(key="k"), timeout=20)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    stderr = sc.stop()
    for leak in LEAKS:
        assert leak not in stderr, f"{leak!r} in the log"
    assert any(line["level"] == "WARNING" for line in _lines(stderr))


def test_access_log_off_and_grpc_core_lines_silenced(tmp_path):
    sc = Process("--store", "memory://", "--set", "access_log_level=off")
    context_pb2_grpc.ContextServiceStub(sc.channel).ListContexts(
        cpb.ListContextsRequest(), timeout=10
    )
    stderr = sc.stop()
    lines = _lines(stderr)  # every line is JSON: no C-core "I1201 ..." lines
    assert not [line for line in lines if line["logger"] == "ctxd.access"]
    assert {line["message"] for line in lines} >= {"serving", "stopped"}


def test_error_lines_carry_the_error_not_the_traceback():
    read, write = os.pipe()
    handler = logs.StderrWriter(write)
    handler.setFormatter(logs.json_formatter())
    handler.addFilter(logs.NoTracebacks())
    logger = logging.getLogger("tests.logs.unit")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    try:
        raise FileNotFoundError(2, "No such file", "/var/lib/ctxd/data.mdb")
    except FileNotFoundError:
        logger.exception("boom", extra={"reference": "abc"})
    handler.flush()
    os.close(write)
    with os.fdopen(read) as fh:
        (line,) = [json.loads(raw) for raw in fh.read().splitlines()]
    assert line["message"] == "boom" and line["reference"] == "abc"
    assert line["error"].startswith("FileNotFoundError: ")
    assert "/var/lib" not in line["error"] and "<path>" in line["error"]
    assert "exc_info" not in line and "Traceback" not in json.dumps(line)
    assert TS.match(line["ts"])


def test_rfc3339_timestamps():
    assert logs.rfc3339(0.0) == "1970-01-01T00:00:00.000Z"
    assert logs.rfc3339(1796159944.2839) == "2026-12-01T21:19:04.283Z"
