"""Load and drain: 50 concurrent clients over 200 contexts with memory
traffic in between; a SIGTERM in the middle of that load drains cleanly and
loses no acknowledged write; a full LMDB map and a read-only data directory
give clear errors without harming what is stored."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

import grpc
import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as cpb
from ctxd_sidecar.api.ctxd.v1 import context_pb2_grpc, memory_pb2_grpc
from ctxd_sidecar.api.ctxd.v1 import memory_pb2 as mpb
from tests.conftest import FAST_RECONNECT

CLIENTS = 50
CONTEXTS = 200
#: Codes a client may see once the server has been told to stop.
STOPPING = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.UNKNOWN,
}


@dataclass
class Ledger:
    """What one client saw acknowledged, and what was in flight when it stopped."""

    #: appended text -> (context id, message id)
    turns: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: turns per context acknowledged
    per_context: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    #: memory key -> (value, version) of the last acknowledged Set
    memory: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: memory key -> value of a Set whose answer never came
    memory_in_flight: dict[str, str] = field(default_factory=dict)
    turn_in_flight: str = ""
    errors: list[str] = field(default_factory=list)
    late_errors: int = 0
    ops: int = 0


class Client(threading.Thread):
    def __init__(self, address: str, n: int, stop: threading.Event, stopping: threading.Event):
        super().__init__(daemon=True)
        self.address = address
        self.n = n
        self.rng = random.Random(n)
        self.stop_ = stop
        self.stopping = stopping
        self.ledger = Ledger()

    def run(self) -> None:
        channel = grpc.insecure_channel(self.address, options=FAST_RECONNECT)
        ctx = context_pb2_grpc.ContextServiceStub(channel)
        mem = memory_pb2_grpc.MemoryServiceStub(channel)
        led, rng, seq = self.ledger, self.rng, 0
        try:
            while not self.stop_.is_set():
                seq += 1
                roll = rng.random()
                try:
                    if roll < 0.5:
                        cid = f"ctx-{rng.randrange(CONTEXTS):03d}"
                        text = f"c{self.n}-{seq}"
                        led.turn_in_flight = text
                        resp = ctx.AppendTurn(
                            cpb.AppendTurnRequest(
                                context_id=cid,
                                messages=[cpb.Message(user=cpb.UserMessage(text=text))],
                            ),
                            timeout=30,
                        )
                        led.turn_in_flight = ""
                        assert len(resp.message_ids) == 1
                        led.turns[text] = (cid, resp.message_ids[0])
                        led.per_context[cid] += 1
                    elif roll < 0.75:
                        key = f"load/c{self.n}/k{seq % 5}"
                        value = f'{{"seq":{seq}}}'
                        led.memory_in_flight[key] = value
                        rec = mem.Set(mpb.SetRequest(key=key, value_json=value), timeout=30).record
                        del led.memory_in_flight[key]
                        led.memory[key] = (value, rec.version)
                    elif roll < 0.9:
                        mine = list(led.memory)
                        if mine:
                            key = rng.choice(mine)
                            rec = mem.Get(mpb.GetRequest(key=key), timeout=30).record
                            # One writer per key: a read sees its last acknowledged write.
                            if (rec.value_json, rec.version) != led.memory[key]:
                                led.errors.append(f"stale read of {key}")
                    else:
                        cid = f"ctx-{rng.randrange(CONTEXTS):03d}"
                        try:
                            ctx.GetContext(
                                cpb.GetContextRequest(context_id=cid, view=cpb.CONTEXT_VIEW_INFO),
                                timeout=30,
                            )
                        except grpc.RpcError as exc:
                            if exc.code() != grpc.StatusCode.NOT_FOUND:
                                raise
                    led.ops += 1
                except grpc.RpcError as exc:
                    if self.stopping.is_set() and exc.code() in STOPPING:
                        led.late_errors += 1
                        return
                    led.errors.append(f"{exc.code()}: {exc.details()}")
                    return
        finally:
            channel.close()


def run_load(address: str, seconds: float, on_midway=None) -> list[Ledger]:
    stop, stopping = threading.Event(), threading.Event()
    clients = [Client(address, n, stop, stopping) for n in range(CLIENTS)]
    for c in clients:
        c.start()
    time.sleep(seconds / 2)
    if on_midway is not None:
        stopping.set()
        on_midway()
    else:
        time.sleep(seconds / 2)
    stop.set()
    for c in clients:
        c.join(60)
        assert not c.is_alive(), "a client is stuck"
    return [c.ledger for c in clients]


def verify(address: str, ledgers: list[Ledger], *, exact: bool) -> tuple[int, int]:
    """Every acknowledged turn is at its message id and every acknowledged
    memory write is the value read back (or the write in flight after it).
    ``exact``: nothing was in flight, so counts match exactly."""
    channel = grpc.insecure_channel(address, options=FAST_RECONNECT)
    ctx = context_pb2_grpc.ContextServiceStub(channel)
    mem = memory_pb2_grpc.MemoryServiceStub(channel)
    try:
        acked: dict[str, tuple[str, str]] = {}
        per_context: dict[str, int] = defaultdict(int)
        for led in ledgers:
            assert not led.errors, led.errors[:5]
            acked.update(led.turns)
            for cid, n in led.per_context.items():
                per_context[cid] += n
        in_flight = {led.turn_in_flight for led in ledgers if led.turn_in_flight}
        stored: dict[str, dict[str, str]] = {}
        for i in range(CONTEXTS):
            cid = f"ctx-{i:03d}"
            try:
                c = ctx.GetContext(cpb.GetContextRequest(context_id=cid), timeout=30).context
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.NOT_FOUND
                assert per_context[cid] == 0, (
                    f"{cid} lost all {per_context[cid]} acknowledged turns"
                )
                continue
            texts = [m.user.text for m in c.messages]
            assert len(texts) == len(set(texts)), f"{cid}: a turn was stored twice"
            assert [m.id for m in c.messages] == [f"m{k + 1}" for k in range(len(texts))]
            assert c.version == c.turns == len(texts)
            extra = set(texts) - {t for t, (cc, _) in acked.items() if cc == cid}
            assert extra <= in_flight, f"{cid}: unacknowledged turns {sorted(extra)[:5]}"
            if exact:
                assert len(texts) == per_context[cid], cid
            stored[cid] = {m.id: m.user.text for m in c.messages}
        for text, (cid, mid) in acked.items():
            assert stored.get(cid, {}).get(mid) == text, f"acknowledged {text} lost from {cid}"
        keys = 0
        for led in ledgers:
            for key, (value, version) in led.memory.items():
                rec = mem.Get(mpb.GetRequest(key=key), timeout=30).record
                late = led.memory_in_flight.get(key)
                if exact or late is None:
                    assert (rec.value_json, rec.version) == (value, version), key
                else:
                    assert rec.value_json in (value, late), key
                keys += 1
        return len(acked), keys
    finally:
        channel.close()


@pytest.mark.slow
def test_fifty_clients_over_two_hundred_contexts(start_sidecar, store_uri_for):
    sc = start_sidecar(store_uri_for("lmdb"))
    ledgers = run_load(sc.address, seconds=6)
    ops = sum(led.ops for led in ledgers)
    turns, keys = verify(sc.address, ledgers, exact=True)
    print(f"\nload: {ops} calls, {turns} acknowledged turns, {keys} memory keys checked")
    assert turns > CLIENTS and keys > CLIENTS


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["lmdb", "s3"])
def test_sigterm_under_load_drains_and_loses_nothing(spawn_sidecar, store_uri_for, backend):
    sc = spawn_sidecar("--store", store_uri_for(backend), "--set", "contexts.checkpoint_every=4")
    codes: list[int] = []
    ledgers = run_load(sc.address, seconds=6, on_midway=lambda: codes.append(sc.terminate(30)))
    assert codes == [0], sc.stderr()[-2000:]
    assert "Traceback" not in sc.stderr()
    sc.start(timeout=60)
    turns, keys = verify(sc.address, ledgers, exact=False)
    late = sum(led.late_errors for led in ledgers)
    print(
        f"\ndrain on {backend}: {turns} acknowledged turns, {keys} keys, "
        f"{late} calls refused while stopping"
    )
    assert turns > CLIENTS


# -- store trouble -------------------------------------------------------------------------------
def test_full_lmdb_map_is_resource_exhausted_and_reads_keep_working(start_sidecar, tmp_path):
    path = tmp_path / "small"
    sc = start_sidecar(f"lmdb://{path}?map_size=1MiB")
    value = '"' + "v" * 60_000 + '"'
    written, err = [], None
    for i in range(100):
        try:
            sc.memory.Set(mpb.SetRequest(key=f"big/{i}", value_json=value), timeout=30)
            written.append(f"big/{i}")
        except grpc.RpcError as exc:
            err = exc
            break
    assert err is not None, "a 1 MiB map took 6 MB of values"
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err.details()
    assert "map_size" in err.details() and str(tmp_path) not in err.details()
    assert written
    # Turns need room too: the same clear error, nothing half-written.
    turn_err = None
    try:
        sc.contexts.AppendTurn(
            cpb.AppendTurnRequest(
                context_id="c", messages=[cpb.Message(user=cpb.UserMessage(text="x" * 200_000))]
            ),
            timeout=30,
        )
    except grpc.RpcError as exc:
        turn_err = exc
    assert turn_err is not None and turn_err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    # Reads keep working.
    for key in written:
        assert sc.memory.Get(mpb.GetRequest(key=key), timeout=30).record.value_json == value
    assert [
        r.key for r in sc.memory.List(mpb.ListRequest(limit=1000), timeout=30).records
    ] == sorted(written)
    sc.contexts.ListContexts(cpb.ListContextsRequest(), timeout=30)
    # A bigger map on restart keeps everything and takes writes again.
    sc.extra["handle"].close()
    sc.extra["handle"].close = lambda: None
    sc2 = start_sidecar(f"lmdb://{path}?map_size=64MiB")
    for key in written:
        assert sc2.memory.Get(mpb.GetRequest(key=key), timeout=30).record.value_json == value
    sc2.memory.Set(mpb.SetRequest(key="after", value_json="1"), timeout=30)


@pytest.fixture
def read_only_dir(tmp_path):
    """A directory that can be switched to read-only by a read-only bind mount
    (running as root, file modes would not stop writes)."""
    path = tmp_path / "ro"
    path.mkdir()
    mounted = (
        subprocess.run(["mount", "--bind", str(path), str(path)], capture_output=True).returncode
        == 0
    )
    if not mounted:
        pytest.skip(
            "cannot bind-mount (needs root with CAP_SYS_ADMIN) to make a read-only directory"
        )

    def make_read_only() -> None:
        subprocess.run(
            ["mount", "-o", "remount,bind,ro", str(path)], check=True, capture_output=True
        )
        probe = path / ".probe"
        try:
            probe.write_text("x")
        except OSError:
            return
        probe.unlink()
        pytest.skip("the read-only bind mount still accepts writes")

    yield path, make_read_only
    # Lazy: the sidecar may still hold files in it until its own teardown.
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


def serve_refused(*args: str) -> str:
    """``ctxd serve`` that must refuse to start: exit 2, one ``ctxd:`` line and
    no traceback in ALL of its stderr (which the spawn fixture truncates)."""
    proc = subprocess.run(
        [sys.executable, "-m", "ctxd_sidecar", "serve", "--listen", "127.0.0.1:0", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("ctxd: ")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_read_only_data_directory_is_refused_clearly_at_start(spawn_sidecar, read_only_dir):
    """LMDB needs its lock file writable, so a read-only data directory is
    refused at start-up with one clear line (no traceback, no path), and the
    data in it is untouched."""
    path, make_read_only = read_only_dir
    sc = spawn_sidecar("--store", f"lmdb://{path}")
    sc.running().memory.Set(mpb.SetRequest(key="kept", value_json='"yes"'), timeout=30)
    assert sc.terminate() == 0
    make_read_only()
    line = serve_refused("--store", f"lmdb://{path}")
    assert line.startswith("ctxd: cannot start: cannot open the lmdb store: "), line
    assert line.endswith("Read-only file system") and str(path) not in line, line
    # The data is intact once the directory is writable again.
    subprocess.run(["mount", "-o", "remount,bind,rw", str(path)], check=True)
    sc.start(timeout=30)
    assert (
        sc.running().memory.Get(mpb.GetRequest(key="kept"), timeout=30).record.value_json == '"yes"'
    )


def test_a_second_sidecar_on_an_lmdb_directory_in_use_is_refused(spawn_sidecar, tmp_path):
    """LMDB itself would let several processes share an environment, but each
    sidecar keeps its own cache and counters: a second one on the directory
    refuses to start with one line, and the first keeps serving."""
    path = tmp_path / "shared"
    one = spawn_sidecar("--store", f"lmdb://{path}")
    one.running().memory.Set(mpb.SetRequest(key="k", value_json="1"), timeout=30)
    line = serve_refused("--store", f"lmdb://{path}")
    assert "in use by another ctxd process" in line and str(path) not in line, line
    assert one.running().memory.Get(mpb.GetRequest(key="k"), timeout=30).record.value_json == "1"
    assert one.terminate() == 0
    # Once the first has stopped, the directory is free again.
    two = spawn_sidecar("--store", f"lmdb://{path}")
    assert two.running().memory.Get(mpb.GetRequest(key="k"), timeout=30).record.value_json == "1"
    assert two.terminate() == 0
    assert "Traceback" not in one.stderr() + two.stderr()


@pytest.fixture
def tiny_fs(tmp_path):
    path = tmp_path / "tiny"
    path.mkdir()
    ok = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(path)], capture_output=True
    )
    if ok.returncode != 0:
        pytest.skip("cannot mount a tmpfs (needs root with CAP_SYS_ADMIN)")
    yield path
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


def test_disk_full_under_lmdb_gives_clear_errors_and_reads_keep_working(start_sidecar, tiny_fs):
    """The map is larger than the file system: writes fail when the disk is
    full, with a retryable status and no internals; what was stored stays
    readable."""
    sc = start_sidecar(f"lmdb://{tiny_fs / 'data'}?map_size=64MiB")
    value = '"' + "d" * 60_000 + '"'
    written, err = [], None
    for i in range(200):
        try:
            sc.memory.Set(mpb.SetRequest(key=f"d/{i}", value_json=value), timeout=30)
            written.append(f"d/{i}")
        except grpc.RpcError as exc:
            err = exc
            break
    assert err is not None, "2 MiB of disk took 12 MB"
    assert err.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED), (
        err.details()
    )
    print(f"\ndisk full: {err.code().name}: {err.details()}")
    assert str(tiny_fs) not in err.details() and "Traceback" not in err.details()
    for key in written:
        assert sc.memory.Get(mpb.GetRequest(key=key), timeout=30).record.value_json == value
    assert len(sc.memory.List(mpb.ListRequest(limit=1000), timeout=30).records) == len(written)
    assert os.path.isdir(tiny_fs / "data")
