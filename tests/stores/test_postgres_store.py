"""What the postgres:// store adds beyond the conformance suite: its options
refused in one line, the change feed waking watchers on other replicas,
compare-and-set exact across many writers, and the database going away and
coming back (UNAVAILABLE meanwhile, never INTERNAL; nothing acknowledged lost)."""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.api.ctxd.v1 import memory_pb2 as mpb
from ctxd_sidecar.plugin.manager import open_store
from tests.support.contexts import append, full, texts, user
from tests.support.pgproxy import PgProxy

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[postgres]')")


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("pool_sise=3", "unknown postgres store option 'pool_sise'"),
        ("pool_size=0", "postgres store option pool_size must be in [1, "),
        (
            "statement_timeout=soon",
            "postgres store option statement_timeout='soon' must be a number",
        ),
        ("sslmode=maybe", 'postgres store option sslmode must be "disable"'),
        ("table=drop%20table", "postgres store option table='drop table'"),
    ],
)
def test_bad_options_stop_serve_with_one_line(query, message):
    # Refused before any connection: nothing listens on port 9.
    uri = f"postgres://nobody@127.0.0.1:9/db?{query}"
    with pytest.raises(ValueError) as err:
        open_store(uri)
    assert str(err.value).startswith(message)
    proc = subprocess.run(
        [sys.executable, "-m", "ctxd_sidecar", "serve", "--listen", "127.0.0.1:0", "--store", uri],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], proc.stderr


def test_a_watcher_is_woken_by_the_change_feed_not_the_poll(spawn_sidecar, pg_uri):
    """B polls once an hour; the turns A commits still reach B's watcher,
    which only the change notification can do within the test's waits (the
    watch's first wait included: it must not sleep a poll while the feed opens)."""
    a = spawn_sidecar("--store", pg_uri).running()
    b = spawn_sidecar("--store", pg_uri, "--set", "contexts.watch_poll_interval=3600").running()
    append(a.contexts, "conv", user("hello"))
    events: queue.Queue = queue.Queue()
    call = b.contexts.WatchContext(pb.WatchContextRequest(context_id="conv"))

    def read() -> None:
        try:
            for ev in call:
                events.put(ev.version)
        except grpc.RpcError:
            pass

    threading.Thread(target=read, daemon=True).start()
    # The watch is live once B delivered a change (a turn made before B
    # subscribed is in the state it subscribes at, so keep making turns).
    live = None
    for i in range(20):
        version = append(a.contexts, "conv", user(f"until live {i}")).version
        with contextlib.suppress(queue.Empty):
            live = events.get(timeout=3)
            break
    assert live is not None, "the watch never delivered a turn"
    # From here on each of A's turns must arrive well inside B's 60 s poll
    # (older events still queued are passed over).
    for _ in range(3):
        version = append(a.contexts, "conv", user("next")).version
        got = events.get(timeout=30)
        while got < version:
            got = events.get(timeout=30)
        assert got == version
    call.cancel()


def test_memory_counter_is_exact_with_many_writers_on_three_replicas(spawn_sidecar, pg_uri):
    replicas = [spawn_sidecar("--store", pg_uri).running() for _ in range(3)]
    replicas[0].memory.Set(mpb.SetRequest(key="counter", value_json="0"), timeout=30)
    per_writer, errors = 10, []

    def increment(r) -> None:
        done = 0
        try:
            while done < per_writer:
                rec = r.memory.Get(mpb.GetRequest(key="counter"), timeout=30).record
                try:
                    r.memory.Set(
                        mpb.SetRequest(
                            key="counter",
                            value_json=json.dumps(json.loads(rec.value_json) + 1),
                            expected_version=rec.version,
                        ),
                        timeout=30,
                    )
                    done += 1
                except grpc.RpcError as exc:
                    if exc.code() != grpc.StatusCode.ABORTED:
                        raise
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=increment, args=(r,)) for r in replicas for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(240)
    assert not errors, errors
    final = replicas[2].memory.Get(mpb.GetRequest(key="counter"), timeout=30).record
    assert json.loads(final.value_json) == per_writer * len(threads)


def _code(fn) -> grpc.StatusCode:
    try:
        fn()
    except grpc.RpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def test_calls_answer_unavailable_while_the_database_is_down(spawn_sidecar, pg_server):
    if not pg_server.pg_ctl:
        pytest.skip("the server named by CTXD_TEST_PG_DSN cannot be stopped by the suite")
    uri = pg_server.fresh_store_uri(connect_timeout=1, statement_timeout=2)
    sc = spawn_sidecar("--store", uri).running()
    append(sc.contexts, "conv", user("before"))
    pg_server.stop("fast")
    try:
        turn = pb.AppendTurnRequest(
            context_id="conv", messages=[user("while down")], idempotency_key="down-1"
        )
        assert _code(lambda: sc.contexts.AppendTurn(turn, timeout=30)) == (
            grpc.StatusCode.UNAVAILABLE
        )
        fresh = pb.GetContextRequest(context_id="never-seen", view=pb.CONTEXT_VIEW_INFO)
        assert _code(lambda: sc.contexts.GetContext(fresh, timeout=30)) == (
            grpc.StatusCode.UNAVAILABLE
        )
        get = mpb.GetRequest(key="k")
        assert _code(lambda: sc.memory.Get(get, timeout=30)) == grpc.StatusCode.UNAVAILABLE
    finally:
        pg_server.start()
    # Back: the retried turn (same idempotency key) lands once.
    deadline = time.monotonic() + 60
    while _code(lambda: sc.contexts.AppendTurn(turn, timeout=30)) != grpc.StatusCode.OK:
        assert time.monotonic() < deadline, "the sidecar did not recover"
        time.sleep(0.2)
    sc.contexts.AppendTurn(turn, timeout=30)
    assert texts(full(sc.contexts, "conv")) == ["before", "while down"]


@pytest.mark.slow
def test_a_database_restart_mid_load_loses_no_acknowledged_write(spawn_sidecar, pg_server):
    if not pg_server.pg_ctl:
        pytest.skip("the server named by CTXD_TEST_PG_DSN cannot be restarted by the suite")
    uri = pg_server.fresh_store_uri(connect_timeout=1, statement_timeout=5)
    replicas = [spawn_sidecar("--store", uri).running() for _ in range(2)]
    acked: dict[str, list[str]] = {}
    codes: list[grpc.StatusCode] = []
    stop = threading.Event()

    def writer(r, name: str) -> None:
        acked[name] = []
        n = 0
        while not stop.is_set():
            text = f"{name}-{n}"
            req = pb.AppendTurnRequest(context_id=name, messages=[user(text)], idempotency_key=text)
            try:
                r.contexts.AppendTurn(req, timeout=30)
                acked[name].append(text)
                n += 1
            except grpc.RpcError as exc:
                codes.append(exc.code())
                time.sleep(0.05)  # retried with the same key

    threads = [
        threading.Thread(target=writer, args=(r, f"w{i}-{j}"))
        for i, r in enumerate(replicas)
        for j in range(2)
    ]
    for t in threads:
        t.start()
    time.sleep(1.0)
    pg_server.restart()
    # Load continues until every writer has been acknowledged again.
    after = {name: len(done) for name, done in acked.items()}
    deadline = time.monotonic() + 90
    while any(len(acked[n]) < after[n] + 3 for n in after) and time.monotonic() < deadline:
        time.sleep(0.1)
    stop.set()
    for t in threads:
        t.join(60)
    assert all(len(acked[n]) >= after[n] + 3 for n in after), "writers did not recover"
    assert set(codes) <= {grpc.StatusCode.UNAVAILABLE}, codes
    for i, r in enumerate(replicas):
        for name, done in acked.items():
            assert texts(full(r.contexts, name)) == done, (i, name)


@pytest.mark.parametrize("kind", ["create", "replace"])
def test_a_conditional_write_whose_reply_is_lost_is_recognised_as_its_own(pg_server, kind):
    """The connection drops after the write committed: the retry (same
    version token) finds the row holding its token and succeeds, where a
    content- or precondition-only check would report a conflict."""
    if not pg_server.pg_ctl:
        pytest.skip("needs the suite's own server (a loopback port to proxy)")
    proxy = PgProxy(pg_server.host, pg_server.port)
    uri = pg_server.fresh_store_uri()
    via_proxy = uri.replace(f":{pg_server.port}/", f":{proxy.port}/")
    store, direct = open_store(via_proxy), open_store(uri)
    try:
        before = direct.put("held", b"first") if kind == "replace" else None
        proxy.arm(b"cut-here/held" if kind == "create" else b"held")
        key = "cut-here/held" if kind == "create" else "held"
        if kind == "create":
            version = store.put(key, b"mine", if_absent=True)
        else:
            version = store.put(key, b"mine", if_version=before)
        assert proxy.cuts == 1, "the reply was not cut: the test proved nothing"
        assert direct.get(key).version == version
        assert direct.get(key).value == b"mine"
    finally:
        store.close()
        direct.close()
        proxy.stop()


@pytest.fixture
def small_tablespace(pg_server):
    """A 4 MiB tmpfs as a tablespace (needs root to mount; the server's user
    owns it): the database runs out of disk there, and nowhere else."""
    import os
    import shutil

    import psycopg

    if not pg_server.pg_ctl or os.geteuid() != 0:
        pytest.skip("needs root (to mount a small tmpfs) and the suite's own server")
    # Beside the server's data directory: its user can reach it there.
    where = Path(pg_server.data_dir).parent / f"small-{os.getpid()}-{time.monotonic_ns()}"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4M", "tmpfs", str(where)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    if pg_server.run_as:
        shutil.chown(where, pg_server.run_as)
    name = where.name.replace("-", "_")
    admin = psycopg.connect(pg_server.dsn(), autocommit=True)
    admin.execute(f"CREATE TABLESPACE {name} LOCATION '{where}'")
    try:
        yield name
    finally:
        # Emptied by the test; dropped before the disk goes, so no later
        # checkpoint looks for its files.
        with contextlib.suppress(psycopg.Error):
            admin.execute(f"DROP TABLESPACE {name}")
            admin.execute("CHECKPOINT")
        admin.close()
        subprocess.run(["umount", "-l", str(where)], check=False)
        with contextlib.suppress(OSError):
            where.rmdir()


def test_a_full_disk_answers_resource_exhausted_and_keeps_what_was_acknowledged(
    spawn_sidecar, pg_server, small_tablespace
):
    import os

    import psycopg

    uri = pg_server.fresh_store_uri(statement_timeout=5)
    store = open_store(uri)  # creates the table; then it moves to the small disk
    schema_name = uri.split("schema=")[1].split("&")[0]
    database = uri.split("?")[0].replace("postgres://", "postgresql://")
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(f"ALTER TABLE {schema_name}.ctxd_kv SET TABLESPACE {small_tablespace}")
    store.close()
    sc = spawn_sidecar("--store", uri).running()
    kept, code = {}, grpc.StatusCode.OK
    for i in range(400):
        value = json.dumps(os.urandom(30_000).hex())
        try:
            sc.memory.Set(mpb.SetRequest(key=f"big/{i}", value_json=value), timeout=30)
            kept[f"big/{i}"] = value
        except grpc.RpcError as exc:
            code = exc.code()
            break
    try:
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, code
        assert kept, "the disk was full before anything was written"
        for key, value in kept.items():
            assert sc.memory.Get(mpb.GetRequest(key=key), timeout=30).record.value_json == value
    finally:
        sc.stop()  # then the table leaves the small disk with its schema
        with psycopg.connect(database, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema_name} CASCADE")
