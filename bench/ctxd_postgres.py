"""ctxd on PostgreSQL against the bare statements it runs, against S3, and
across replicas (group ``postgres``).

A PostgreSQL server (``CTXD_TEST_PG_DSN``, else one started from the
machine's packages by ``tests.support.pg_server``, fsync on) serves:

* ``floor.pg.create`` / ``floor.pg.replace`` / ``floor.pg.get``: the store's
  own statements (create-only insert, versioned update, get; 2 KB values)
  from a bare psycopg connection: what one database round trip costs;
* ``floor.echo_insert.turn.postgres``: the AppendTurn floor, a gRPC echo of
  the AppendTurnRequest bytes plus that create-only insert of them, timed
  right before each turn at the first mark;
* ``ctxd.append_turn.postgres.h<mark>`` and ``ctxd.turn_one_call.postgres.h<mark>``
  (the rows of ``bench.ctxd_contexts``, 10 and 10,000 messages of history);
* ``ctxd.turn_one_call.s3-ref.h10``: the same one-call turn on S3 (moto's
  server, real HTTP), measured in this group so the comparison is same-run;
* ``ctxd.memory.{set,get}.postgres``: Memory.Set / Memory.Get of a 2 KB value;
* ``ctxd.watch.replicas.postgres``: AppendTurn on replica A until replica B's
  WatchContext stream delivers it (the change feed, LISTEN/NOTIFY).

:func:`add_checks` turns them into MET/MISSED rows against the issue's targets.
"""

from __future__ import annotations

import contextlib
import dataclasses
import queue
import secrets
import threading
import time
from collections.abc import Iterator

from bench.ctxd_contexts import Bench
from bench.ctxd_rpc import CALL_TIMEOUT_S, open_channel, sidecar_cmd
from bench.harness import Context, Report, Result, measure, register, result_from_samples
from bench.moto_s3 import create_bucket, moto_server, store_uri
from bench.procs import python_module_cmd, spawn

GROUP = "postgres"
VALUE_BYTES = 2048
FLOOR_TURN = "floor.echo_insert.turn.postgres"
S3_LABEL = "s3-ref"
WATCH_ROW = "ctxd.watch.replicas.postgres"


@contextlib.contextmanager
def _server() -> Iterator[object]:
    from tests.support import pg_server as pg

    server = pg.launch()
    try:
        yield server
    finally:
        pg.cleanup(server)


def _bare(uri: str):
    """A psycopg connection and the plugin's statements on a table of their own."""
    import psycopg

    from ctxd_plugins.postgres import schema
    from ctxd_plugins.postgres.options import PostgresOptions, conninfo_of

    query = dict(p.split("=", 1) for p in uri.split("?", 1)[1].split("&"))
    conninfo, opts = conninfo_of(uri), PostgresOptions.model_validate(query)
    conn = psycopg.connect(conninfo, autocommit=True)
    schema.ensure(conn, opts.schema_name, "bench_floor")
    return conn, schema.statements(opts.schema_name, "bench_floor")


def _floors(ctx: Context, conn, stmts) -> Iterator[Result]:
    n = ctx.pick(full=500, quick=30)
    value = secrets.token_bytes(VALUE_BYTES)
    keys = iter(range(10**9))
    common = {"value_bytes": VALUE_BYTES, "client": "psycopg, one connection, autocommit"}

    def create() -> None:
        conn.execute(stmts["create"], {"key": f"c/{next(keys)}".encode(), "value": value,
                                       "version": secrets.token_hex(12)})  # fmt: skip

    yield measure(create, n, name="floor.pg.create", group=GROUP, extra=common)
    version = ["v0"]
    conn.execute(stmts["create"], {"key": b"cas", "value": value, "version": "v0"})

    def replace() -> None:
        new = secrets.token_hex(12)
        rows = conn.execute(
            stmts["replace"],
            {"key": b"cas", "value": value, "version": new, "if_version": version[0]},
        ).fetchall()
        if not rows:
            raise RuntimeError("the floor's own compare-and-set failed")
        version[0] = new

    yield measure(replace, n, name="floor.pg.replace", group=GROUP, extra=common)
    yield measure(
        lambda: conn.execute(stmts["get"], {"key": b"cas"}).fetchone(),
        n,
        name="floor.pg.get",
        group=GROUP,
        extra=common,
    )


def _echo_insert(conn, stmts, echo):
    """The AppendTurn floor: echo the request bytes, then insert them once."""

    def floor(request: bytes) -> None:
        echo(request, timeout=CALL_TIMEOUT_S)
        conn.execute(
            stmts["create"],
            {"key": secrets.token_hex(8).encode(), "value": request,
             "version": secrets.token_hex(12)},
        )  # fmt: skip

    return floor


def _turns(ctx: Context, uri: str, conn, stmts) -> Iterator[Result]:
    import grpc

    from bench.echo_server import METHOD
    from ctxd_sidecar.api.ctxd.v1 import context_pb2_grpc

    marks = ctx.pick(full=(10, 10_000), quick=(10, 100))
    n = ctx.pick(full=200, quick=10)
    with (
        spawn(sidecar_cmd(uri)) as (_, port),
        spawn(python_module_cmd("bench.echo_server", "--watch-stdin")) as (_, echo_port),
    ):
        channel = open_channel(port)
        echo_channel = grpc.insecure_channel(f"127.0.0.1:{int(echo_port)}")
        try:
            echo = echo_channel.unary_unary(METHOD, _registered_method=True)
            floor = _echo_insert(conn, stmts, echo)
            b = Bench(context_pb2_grpc.ContextServiceStub(channel), "postgres")
            for _ in range(20):
                b.turn("postgres-warmup", [b.user, b.assistant])
                floor(b"warm-up")
            results, floor_ns = b.measure_marks(marks, n, floor)
            yield result_from_samples(
                floor_ns,
                name=FLOOR_TURN,
                group=GROUP,
                extra={"what": "gRPC echo of the AppendTurnRequest bytes + one create-only "
                       "insert of them (psycopg), timed right before each turn"},
            )  # fmt: skip
            for mark in marks:
                for kind in ("append", "turn_one_call"):
                    # This group's rows (``--merge --only contexts`` keeps them).
                    yield dataclasses.replace(results[mark][kind], group=GROUP)
            yield from _memory(ctx, channel)
        finally:
            channel.close()
            echo_channel.close()


def _memory(ctx: Context, channel) -> Iterator[Result]:
    import json

    from ctxd_sidecar.api.ctxd.v1 import memory_pb2 as mpb
    from ctxd_sidecar.api.ctxd.v1 import memory_pb2_grpc

    stub = memory_pb2_grpc.MemoryServiceStub(channel)
    n = ctx.pick(full=300, quick=20)
    value = json.dumps("x" * (VALUE_BYTES - 2))
    keys = iter(range(10**9))
    yield measure(
        lambda: stub.Set(mpb.SetRequest(key=f"k/{next(keys) % 50}", value_json=value), timeout=30),
        n,
        name="ctxd.memory.set.postgres",
        group=GROUP,
        ratio_to="floor.pg.replace",
    )
    yield measure(
        lambda: stub.Get(mpb.GetRequest(key=f"k/{next(keys) % 10}"), timeout=30),
        n,
        name="ctxd.memory.get.postgres",
        group=GROUP,
        ratio_to="floor.pg.get",
    )


def _s3_turns(ctx: Context) -> Iterator[Result]:
    from ctxd_sidecar.api.ctxd.v1 import context_pb2_grpc

    n = ctx.pick(full=200, quick=20)
    with moto_server() as endpoint:
        create_bucket(endpoint, "bench-postgres-ref")
        with spawn(sidecar_cmd(store_uri(endpoint, "bench-postgres-ref"))) as (_, port):
            channel = open_channel(port)
            try:
                b = Bench(context_pb2_grpc.ContextServiceStub(channel), S3_LABEL)
                for _ in range(20):
                    b.turn("s3-warmup", [b.user, b.assistant])
                results, _ = b.measure_marks((10,), n)
                yield dataclasses.replace(results[10]["turn_one_call"], group=GROUP)
            finally:
                channel.close()


def _watch(ctx: Context, uri: str) -> Iterator[Result]:
    import grpc

    from ctxd_sidecar.api.ctxd.v1 import context_pb2_grpc

    n = ctx.pick(full=100, quick=5)
    cmd = sidecar_cmd(uri)
    with spawn(cmd) as (_, port_a), spawn(cmd) as (_, port_b):
        channels = [open_channel(port_a), open_channel(port_b)]
        try:
            a, b = (Bench(context_pb2_grpc.ContextServiceStub(ch), "w") for ch in channels)
            a.turn("watched", [a.user])
            arrived: queue.Queue = queue.Queue()
            call = b.stub.WatchContext(b.pb.WatchContextRequest(context_id="watched"))

            def read() -> None:
                with contextlib.suppress(grpc.RpcError):
                    for ev in call:
                        arrived.put((ev.version, time.perf_counter_ns()))

            threading.Thread(target=read, daemon=True).start()
            time.sleep(ctx.pick(full=1.0, quick=0.3))  # the watch and its LISTEN are set up
            samples: list[int] = []
            for _ in range(n + 3):
                t0 = time.perf_counter_ns()
                version = a.turn("watched", [a.user, a.assistant]).version
                while True:
                    seen, at = arrived.get(timeout=30)
                    if seen == version:
                        break
                samples.append(at - t0)
            call.cancel()
        finally:
            for ch in channels:
                ch.close()
    yield result_from_samples(
        samples[3:],
        name=WATCH_ROW,
        group=GROUP,
        extra={"what": "AppendTurn on A until B's WatchContext delivers it", "replicas": 2},
    )


@register(GROUP)
def postgres(ctx: Context) -> Iterator[Result]:
    from tests.support import pg_server as pg

    reason = pg.unavailable_reason()
    if reason:
        ctx.skip(GROUP, reason)
        return
    with _server() as server:
        uri = server.fresh_store_uri(pool_size=8)
        conn, stmts = _bare(uri)
        try:
            yield from _floors(ctx, conn, stmts)
            yield from _turns(ctx, uri, conn, stmts)
        finally:
            conn.close()
        yield from _watch(ctx, server.fresh_store_uri(pool_size=8))
    yield from _s3_turns(ctx)


def _p50(report: Report, name: str) -> float | None:
    r = report.get(name)
    return None if r is None else r.p50


def _over(report: Report, num: str, den: str) -> float | None:
    a, b = _p50(report, num), _p50(report, den)
    return None if a is None or not b else a / b


def add_checks(report: Report) -> None:
    """The issue's targets for PostgreSQL as MET/MISSED rows (when the group ran)."""
    if report.get(FLOOR_TURN) is None:
        return
    marks = sorted(
        int(r.name.rsplit(".h", 1)[1])
        for r in report.results
        if r.name.startswith("ctxd.append_turn.postgres.h")
    )
    first, last = f"h{marks[0]}", f"h{marks[-1]}"
    append = f"ctxd.append_turn.postgres.{first}"
    report.add_check(
        "postgres.append_turn_vs_floor",
        "AppendTurn on PostgreSQL, p50 / (gRPC echo + the same insert)",
        source=append,
        value=_over(report, append, FLOOR_TURN),
        op="<=",
        limit=1.3,
        unit="x",
    )
    turn = f"ctxd.turn_one_call.postgres.{first}"
    report.add_check(
        "postgres.turn_vs_s3",
        "one-call turn on PostgreSQL, p50 / the same turn on S3 (moto server)",
        source=turn,
        value=_over(report, turn, f"ctxd.turn_one_call.{S3_LABEL}.h10"),
        op="<=",
        limit=round(1 / 3, 3),
        unit="x",
    )
    watch = _p50(report, WATCH_ROW)
    report.add_check(
        "postgres.watch_across_replicas",
        "WatchContext on B sees A's turn, p50",
        source=WATCH_ROW,
        value=None if watch is None else watch / 1000,
        op="<=",
        limit=100.0,
        unit="ms",
    )
    report.add_check(
        "postgres.growth",
        f"AppendTurn on PostgreSQL, p50 {last} / {first}",
        source=f"ctxd.append_turn.postgres.{last}",
        value=_over(report, f"ctxd.append_turn.postgres.{last}", append),
        op="<=",
        limit=1.15,
        unit="x",
    )
