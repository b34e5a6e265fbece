"""Metrics that move: scraped from a real ``ctxd serve`` after real calls."""

from __future__ import annotations

import re
import urllib.request

import grpc
import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as cpb
from ctxd_sidecar.api.ctxd.v1 import memory_pb2 as mpb
from tests.conftest import free_port

KEYS = 120
CONTEXTS = 30
TURNS_EACH = 2


def scrape(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()


def value(body: str, name: str, labels: str = "") -> float:
    """One sample of ``name`` (with exactly these labels, sorted as exposed)."""
    wanted = f"{name}{{{labels}}}" if labels else name
    for line in body.splitlines():
        if line.startswith(wanted + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {wanted}")


def test_gauges_and_histograms_follow_real_calls(spawn_sidecar, tmp_path):
    port = free_port()
    args = ("--store", f"lmdb://{tmp_path / 'data'}", "--metrics-listen", f"127.0.0.1:{port}")
    sc = spawn_sidecar(*args, "--set", "access_log_level=off")
    r = sc.running()
    body = scrape(port)
    assert value(body, "ctxd_memory_keys") == 0
    base = value(body, "ctxd_contexts_resident")  # the root agent's context
    assert base <= 1

    total = 0
    for i in range(KEYS):
        v = f'{{"i":{i}}}'
        total += len(v)
        r.memory.Set(mpb.SetRequest(key=f"k/{i:04d}", value_json=v), timeout=10)
    for c in range(CONTEXTS):
        for t in range(TURNS_EACH):
            r.contexts.AppendTurn(
                cpb.AppendTurnRequest(
                    context_id=f"ctx-{c}",
                    messages=[cpb.Message(user=cpb.UserMessage(text=f"turn {t} " * 50))],
                ),
                timeout=10,
            )
    body = scrape(port)
    assert value(body, "ctxd_memory_keys") == KEYS
    assert value(body, "ctxd_memory_bytes") == total
    assert value(body, "ctxd_contexts_resident") == base + CONTEXTS
    # One token observation per turn, and no per-context series at all.
    assert value(body, "ctxd_context_tokens_count") == CONTEXTS * TURNS_EACH
    assert value(body, "ctxd_context_tokens_sum") > 0
    assert not re.search(r'context="ctx-', body), "a per-context label"
    # RPC metrics carry the service.
    labels = 'code="OK",method="AppendTurn",service="ctxd.v1.ContextService"'
    assert value(body, "ctxd_rpc_requests_total", labels) == CONTEXTS * TURNS_EACH
    labels = 'code="OK",method="Set",service="ctxd.v1.MemoryService"'
    assert value(body, "ctxd_rpc_requests_total", labels) == KEYS

    # Deleting moves the gauges back down.
    for i in range(20):
        r.memory.Delete(mpb.DeleteRequest(key=f"k/{i:04d}"), timeout=10)
    r.contexts.DeleteContext(cpb.DeleteContextRequest(context_id="ctx-0"), timeout=10)
    with pytest.raises(grpc.RpcError):
        r.memory.Get(mpb.GetRequest(key="k/0000"), timeout=10)
    body = scrape(port)
    assert value(body, "ctxd_memory_keys") == KEYS - 20
    assert value(body, "ctxd_contexts_resident") == base + CONTEXTS - 1
    assert value(body, "ctxd_memory_bytes") < total

    # A restarted sidecar counts what is stored before it serves.
    assert sc.terminate() == 0
    sc.start()
    body = scrape(port)
    assert value(body, "ctxd_memory_keys") == KEYS - 20
    assert value(body, "ctxd_contexts_resident") == base  # nothing else restored yet
    sc.running().contexts.GetContext(cpb.GetContextRequest(context_id="ctx-1"), timeout=10)
    assert value(scrape(port), "ctxd_contexts_resident") == base + 1
