"""A PostgreSQL write whose reply is lost knows its own outcome even when
another writer wrote on top before the retry: the store recognises its
version among those the row replaced, so a committed compare-and-set is
never answered "version does not match" (a caller's CAS loop would then
apply it twice)."""

from __future__ import annotations

import psycopg
import pytest

from ctxd_sidecar.plugin.manager import open_store
from ctxd_sidecar.plugin.store import PreconditionFailed, StoreUnavailable
from tests.support.pgproxy import PgProxy

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[postgres]')")


@pytest.fixture
def stores(pg_server):
    """(a store through a proxy that can lose replies, the proxy, a direct store)."""
    if not pg_server.pg_ctl:
        pytest.skip("needs the suite's own server (a loopback port to proxy)")
    proxy = PgProxy(pg_server.host, pg_server.port)
    uri = pg_server.fresh_store_uri()
    lossy, direct = open_store(proxy.uri(uri, pg_server.port)), open_store(uri)
    yield lossy, proxy, direct
    lossy.close()
    direct.close()
    proxy.stop()


@pytest.mark.parametrize("kind", ["replace", "create", "put"])
def test_a_write_replaced_before_its_retry_is_still_its_own(stores, kind):
    lossy, proxy, direct = stores
    before = direct.put("k", b"0") if kind == "replace" else None
    on_top: list[str] = []

    def write_on_top() -> None:  # the server committed ours; the reply is lost
        held = direct.get("k")
        on_top.append(direct.put("k", b"on top", if_version=held.version))

    proxy.arm(b"UPDATE" if kind == "replace" else b"INSERT", write_on_top)
    if kind == "replace":
        version = lossy.put("k", b"mine", if_version=before)
    elif kind == "create":
        version = lossy.put("k", b"mine", if_absent=True)
    else:
        version = lossy.put("k", b"mine")
    assert proxy.cuts == 1 and on_top, "no reply was lost: the test proved nothing"
    assert version != before and isinstance(version, str)
    # Applied once: the write on top replaced it, and the retry wrote nothing.
    got = direct.get("k")
    assert (got.value, got.version) == (b"on top", on_top[0])


def test_a_refused_write_is_refused_after_a_lost_reply(stores):
    lossy, proxy, direct = stores
    stale = direct.put("k", b"0")
    direct.put("k", b"1", if_version=stale)
    proxy.arm(b"UPDATE", lambda: direct.put("k", b"2"))
    with pytest.raises(PreconditionFailed):
        lossy.put("k", b"mine", if_version=stale)
    assert proxy.cuts == 1
    assert direct.get("k").value == b"2"


def test_a_row_that_cannot_tell_answers_unavailable(stores):
    """Deleted and created again before the retry: whether the write landed
    is unknowable, and the store says so instead of guessing."""
    lossy, proxy, direct = stores
    before = direct.put("k", b"0")

    def replace_the_row() -> None:
        direct.delete("k")
        direct.put("k", b"new", if_absent=True)

    proxy.arm(b"UPDATE", replace_the_row)
    with pytest.raises(StoreUnavailable, match="cannot|too much"):
        lossy.put("k", b"mine", if_version=before)


def test_a_table_of_the_first_layout_is_upgraded_in_place(pg_server):
    uri = pg_server.fresh_store_uri()
    schema = uri.split("schema=")[1].split("&")[0]
    dsn = uri.split("?")[0]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(
            f"CREATE TABLE {schema}.ctxd_kv (key bytea PRIMARY KEY, value bytea NOT NULL,"
            " version text NOT NULL)"
        )
        conn.execute(f"CREATE TABLE {schema}.ctxd_kv_meta (name text PRIMARY KEY, value text)")
        conn.execute(f"INSERT INTO {schema}.ctxd_kv_meta VALUES ('schema_version', '1')")
        conn.execute(f"INSERT INTO {schema}.ctxd_kv VALUES ('old'::bytea, 'v'::bytea, 'x1')")
    store = open_store(uri)
    try:
        assert store.get("old").value == b"v"
        assert store.put("old", b"w", if_version="x1")
    finally:
        store.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        meta = conn.execute(f"SELECT value FROM {schema}.ctxd_kv_meta").fetchone()
        replaced = conn.execute(f"SELECT replaced FROM {schema}.ctxd_kv").fetchone()
    assert meta == ("2",) and replaced == (["x1"],)
