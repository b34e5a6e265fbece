"""The PostgreSQL store itself (psycopg 3 and its pool); opened by
:mod:`ctxd_plugins.postgres`.

Every operation is one indexed statement in its own transaction. Versions
are random tokens chosen by the writer, and each row keeps the last versions
it replaced (see :mod:`.schema`), so when a connection drops after a write
was sent, the store reads the row back and tells "mine landed" (even when
another replica has written on top since) from "someone else's" by that
token, never by comparing content.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import threading
from collections.abc import Callable
from typing import Any

import psycopg
import psycopg_pool
from psycopg import errors as pg_errors

from ctxd_plugins.postgres import schema
from ctxd_plugins.postgres.listener import Listener
from ctxd_plugins.postgres.options import PostgresOptions, redacted
from ctxd_plugins.postgres.refusal import refusal
from ctxd_sidecar.plugin import (
    Capability,
    Item,
    PreconditionFailed,
    Store,
    StoreError,
    StoreFull,
    StoreUnavailable,
)

log = logging.getLogger(__name__)

#: Longest key accepted (bytes): well inside a btree entry and a NOTIFY payload.
PG_MAX_KEY_BYTES = 1024
#: Sorts after every byte a UTF-8 key can hold: the end of a prefix range.
_AFTER_UTF8 = b"\xff"


class PostgresStore(Store):
    name = "postgres"
    max_key_bytes = PG_MAX_KEY_BYTES

    def __init__(self, conninfo: str, options: PostgresOptions) -> None:
        self.options = options
        self.where = redacted(conninfo)
        self._sql = schema.statements(options.schema_name, options.table)
        suffix = "+notify" if options.notify else ""
        self._write_sql = {name: self._sql[name + suffix] for name in _WRITES}
        self.channel = (
            "ctxd_"
            + hashlib.blake2b(
                f"{options.schema_name}.{options.table}".encode(), digest_size=8
            ).hexdigest()
        )
        caps = {Capability.LIST, Capability.DELETE, Capability.CONDITIONAL_PUT, Capability.SHARED}
        if options.notify:
            caps.add(Capability.CHANGE_FEED)
        self.capabilities = frozenset(caps)
        self.conn_kwargs: dict[str, Any] = {
            "connect_timeout": max(1, round(options.connect_timeout)),
            "options": f"-c statement_timeout={int(options.statement_timeout * 1000)}",
            # A server that vanishes without closing the connection (a
            # failover, a partition) is noticed in seconds, not TCP's hours.
            "keepalives": 1,
            "keepalives_idle": 5,
            "keepalives_interval": 2,
            "keepalives_count": 3,
            "tcp_user_timeout": int((options.statement_timeout + options.connect_timeout) * 1000),
        }
        if options.sslmode:
            self.conn_kwargs["sslmode"] = options.sslmode
        self.conninfo = conninfo
        try:
            with psycopg.connect(conninfo, autocommit=True, **self.conn_kwargs) as conn:
                schema.ensure(conn, options.schema_name, options.table)
        except psycopg.Error as exc:
            raise refusal(exc, conninfo, options.connect_timeout, _translate) from None
        self.pool = psycopg_pool.ConnectionPool(
            conninfo,
            min_size=1,
            max_size=options.pool_size,
            kwargs={"autocommit": True, **self.conn_kwargs},
            timeout=options.connect_timeout,
            # Keep trying while the database is away; calls meanwhile answer
            # UNAVAILABLE after ``connect_timeout``.
            reconnect_timeout=float("inf"),
            name="ctxd-postgres",
            open=False,
        )
        self.pool.open(wait=False)
        self._listener: Listener | None = None
        self._listener_lock = threading.Lock()

    # -- running statements --------------------------------------------------------------
    def _run(self, name: str, params: dict[str, Any]) -> list[tuple]:
        """One statement on a pooled connection; its rows."""
        stmt = self._write_sql.get(name) or self._sql[name]
        try:
            with self.pool.connection() as conn:
                cur = conn.execute(stmt, params)
                return cur.fetchall() if cur.description else []
        except psycopg_pool.PoolTimeout:
            raise StoreUnavailable(f"no connection to {self.where}") from None
        except psycopg.Error as exc:
            error = _translate(exc)
            if isinstance(error, ConnectionLost):
                # Idle connections to a restarted server are dead too: drop
                # them now rather than fail one call on each.
                self.pool.check()
            raise error from None

    def _write(self, name: str, params: dict[str, Any]) -> bool:
        """A write that, if its connection was lost, learns what became of
        it and is sent again only when it did not land; whether it wrote a
        row (for conditional writes, whether the precondition held).

        The version token in ``params`` identifies it: it is the row's
        version, or in the row's ``replaced`` list when another writer
        replaced it since. Content is never evidence."""
        try:
            return bool(self._run(name, params))
        except ConnectionLost as exc:
            lost = exc
        for _ in range(RESENDS):
            try:
                # The attempt before may or may not have committed.
                landed = self._settle(name, params)
                if landed is None:
                    landed = bool(self._run(name, params)) or self._settle(name, params)
                if landed is not None:
                    return landed
            except ConnectionLost as exc:
                lost = exc
        raise lost

    def _settle(self, name: str, params: dict[str, Any]) -> bool | None:
        """Whether the write ``params`` names was applied (True), refused
        (False) or not yet seen (None: send it again), read from the row as
        it is now; StoreUnavailable when the row can no longer tell."""
        rows = self._run("lineage", {"key": params["key"]})
        version, replaced = (rows[0][0], rows[0][1] or []) if rows else (None, [])
        mine = params.get("version")
        if mine is not None and (version == mine or mine in replaced):
            return True
        if name == "delete":
            return True if version is None else None
        if name == "put" or (name == "create" and version is None):
            return None  # not there: sending it again is safe
        if name == "create":
            return False  # someone else's row
        expected = params["if_version"]
        if version == expected:
            return None  # still the version the write expects
        if name == "delete_if" and version is None:
            return True  # gone: by this delete or another of the same version
        if expected in replaced:
            return False  # replaced by others, and ours is not among them
        raise StoreUnavailable(
            "the connection to the database dropped during a conditional write, and the "
            "row has changed too much since to tell whether that write was applied"
        )

    # -- the store interface --------------------------------------------------------------
    def get(self, key: str) -> Item | None:
        rows = self._run("get", {"key": key.encode()})
        if not rows:
            return None
        value, version = rows[0]
        return Item(bytes(value), version)

    def put(self, key, value, *, if_version=None, if_absent=False) -> str:
        version = secrets.token_hex(12)
        params = {
            "key": key.encode(),
            "value": bytes(value),
            "version": version,
            "channel": self.channel,
            "key_text": key,
        }
        if if_absent and if_version is not None:
            raise PreconditionFailed("if_absent and if_version cannot both hold")
        if if_absent:
            name = "create"
        elif if_version is not None:
            name, params["if_version"] = "replace", if_version
        else:
            name = "put"
        if not self._write(name, params):
            raise PreconditionFailed("version does not match")
        return version

    def delete(self, key, *, if_version=None) -> None:
        params = {"key": key.encode(), "channel": self.channel, "key_text": key}
        if if_version is None:
            self._write("delete", params)
            return
        params["if_version"] = if_version
        if not self._write("delete_if", params):
            raise PreconditionFailed("version does not match")

    def list(self, prefix, *, start_after="", limit=None) -> list[str]:
        if limit is not None and limit <= 0:
            return []
        bprefix = prefix.encode()
        rows = self._run(
            "list",
            {
                "after": start_after.encode(),
                "prefix": bprefix,
                "upper": bprefix + _AFTER_UTF8,
                "limit": limit,
            },
        )
        return [bytes(row[0]).decode() for row in rows]

    def watch(self, prefix: str, callback: Callable[[str | None], None]) -> Callable[[], None]:
        if Capability.CHANGE_FEED not in self.capabilities:
            raise NotImplementedError("this postgres store was opened with notify=false")
        with self._listener_lock:
            if self._listener is None:
                self._listener = Listener(self.conninfo, self.conn_kwargs, self.channel)
            return self._listener.add(prefix, callback)

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
        self.pool.close()

    def describe(self) -> str:
        o = self.options
        return f"{self.where} table {o.schema_name}.{o.table}"


_WRITES = ("put", "create", "replace", "delete", "delete_if")
#: Times a write whose connection dropped is sent again (each after reading
#: what became of the one before).
RESENDS = 2


class ConnectionLost(StoreUnavailable):
    """The connection broke with the statement possibly sent: a write is
    retried once on a fresh connection (a timeout or a refused connection is
    not: the first would only wait as long again, the second sent nothing)."""


def _translate(exc: psycopg.Error) -> StoreError:
    """A psycopg error as a store error whose message carries no secrets."""
    state = getattr(exc, "sqlstate", None) or ""
    if isinstance(exc, pg_errors.DiskFull):
        return StoreFull(f"the database is out of disk space (SQLSTATE {state})")
    if isinstance(exc, pg_errors.QueryCanceled):
        return StoreUnavailable("the database did not answer within statement_timeout")
    if isinstance(exc, pg_errors.ReadOnlySqlTransaction):
        return StoreUnavailable("connected to a read-only server (failover in progress?)")
    if isinstance(exc, psycopg.OperationalError) or state.startswith(("08", "57", "53")):
        return ConnectionLost(f"the database is unreachable or restarting ({type(exc).__name__})")
    return StoreError(f"database error {type(exc).__name__} (SQLSTATE {state or '?'})")
