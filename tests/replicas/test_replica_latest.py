"""A LATEST read reflects every turn acknowledged before it began, also when
it waited for another read of the same context on the same replica that
was restoring the context (after a delete and re-create) from an older view
of the store. The other read's restore is held at one of its reads by a
proxy between the replica and PostgreSQL, so the order is exact."""

from __future__ import annotations

import concurrent.futures
import time

import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from tests.support.contexts import append, texts, user
from tests.support.pgproxy import PgProxy

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[postgres]')")


def latest(replica, cid: str) -> list[str]:
    req = pb.GetContextRequest(
        context_id=cid, view=pb.CONTEXT_VIEW_FULL, consistency=pb.READ_CONSISTENCY_LATEST
    )
    return texts(replica.contexts.GetContext(req, timeout=30).context)


def test_a_latest_read_queued_behind_a_restore_sees_turns_acknowledged_before_it(
    spawn_sidecar, pg_server
):
    if not pg_server.pg_ctl:
        pytest.skip("needs the suite's own server (a loopback port to proxy)")
    uri = pg_server.fresh_store_uri()
    proxy = PgProxy(pg_server.host, pg_server.port)
    try:
        a = spawn_sidecar("--store", uri).running()
        b = spawn_sidecar("--store", proxy.uri(uri, pg_server.port)).running()
        for text in ("old 1", "old 2", "old 3"):
            append(a.contexts, "conv", user(text))
        assert latest(b, "conv") == ["old 1", "old 2", "old 3"]  # B holds versions 1-3
        assert a.contexts.DeleteContext(pb.DeleteContextRequest(context_id="conv")).deleted
        append(a.contexts, "conv", user("new 1"))

        # B's next read meets the fence (version 4 of the old conversation)
        # and restores the new one; its read of version 2 is held.
        release = proxy.pause(b"/000000000002")
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            first = pool.submit(latest, b, "conv")
            assert proxy.paused.wait(30), "the restore's read was not held"
            append(a.contexts, "conv", user("new 2"))  # acknowledged now
            second = pool.submit(latest, b, "conv")  # begins after the ack
            # Let the second read reach the context's lock before the first
            # finishes (if it arrives later, it passes either way).
            time.sleep(0.5)
            release.set()
            assert first.result(30) in (["new 1"], ["new 1", "new 2"])
            assert second.result(30) == ["new 1", "new 2"]
    finally:
        proxy.stop()
