"""The table a ``postgres://`` store keeps its keys in, created and versioned
on first start.

Keys are ``bytea`` so the primary key's order is byte order (what the store
interface's ``list`` promises), whatever the database's collation. Versions
are per-write tokens the writer chooses, and each row keeps the versions it
replaced (``replaced``, newest first, at most :data:`HISTORY`): a write
retried after a dropped connection recognises its own first attempt by them,
even when another writer has replaced it since.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from ctxd_sidecar.plugin import StoreError

#: The layout this code reads and writes; stored in the ``<table>_meta`` table.
#: 2 added ``replaced``; a layout-1 table is upgraded in place at start-up.
SCHEMA_VERSION = 2
#: Versions a row remembers having replaced (24 hex characters each).
HISTORY = 16


def statements(schema: str, table: str) -> dict[str, sql.Composed]:
    """Every statement the store runs, one per operation, by name."""
    t = sql.Identifier(schema, table)
    notify = sql.SQL("SELECT pg_notify(%(channel)s, %(key_text)s) FROM w")
    plain = sql.SQL("SELECT 1 FROM w")
    out: dict[str, sql.Composed] = {
        "get": sql.SQL("SELECT value, version FROM {} WHERE key = %(key)s").format(t),
        "version": sql.SQL("SELECT version FROM {} WHERE key = %(key)s").format(t),
        "lineage": sql.SQL("SELECT version, replaced FROM {} WHERE key = %(key)s").format(t),
        "list": sql.SQL(
            "SELECT key FROM {} WHERE key > %(after)s AND key >= %(prefix)s AND key < %(upper)s"
            " ORDER BY key LIMIT %(limit)s"
        ).format(t),
    }
    # Each write pushes the version it replaces onto ``replaced`` (on the
    # server, in the same statement, so no writer can skip it).
    pushed = f"(ARRAY[t.version] || t.replaced)[1:{HISTORY}]"
    writes = {
        "put": "INSERT INTO {} AS t (key, value, version, replaced)"
        " VALUES (%(key)s, %(value)s, %(version)s, '{{}}') ON CONFLICT (key) DO UPDATE"
        f" SET value = EXCLUDED.value, version = EXCLUDED.version, replaced = {pushed}",
        "create": "INSERT INTO {} (key, value, version, replaced)"
        " VALUES (%(key)s, %(value)s, %(version)s, '{{}}') ON CONFLICT (key) DO NOTHING",
        "replace": "UPDATE {} AS t SET value = %(value)s, version = %(version)s,"
        f" replaced = {pushed} WHERE key = %(key)s AND version = %(if_version)s",
        "delete": "DELETE FROM {} WHERE key = %(key)s",
        "delete_if": "DELETE FROM {} WHERE key = %(key)s AND version = %(if_version)s",
    }
    for name, text in writes.items():
        body = sql.SQL(text).format(t)
        # One statement either way: the notification is sent at its commit,
        # and only for a row it actually wrote.
        out[name] = sql.SQL("WITH w AS ({} RETURNING key) {}").format(body, plain)
        out[name + "+notify"] = sql.SQL("WITH w AS ({} RETURNING key) {}").format(body, notify)
    return out


def ensure(conn: psycopg.Connection, schema: str, table: str) -> None:
    """Create the schema, table and version row if missing (under an advisory
    lock, so replicas starting together do it once), and refuse a layout
    newer than this code."""
    meta = sql.Identifier(schema, f"{table}_meta")
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"ctxd:{schema}.{table}",))
        # Only when missing: CREATE SCHEMA needs a privilege an existing
        # schema (``public``) does not.
        if not conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone():
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (key bytea PRIMARY KEY, value bytea NOT NULL,"
                " version text NOT NULL, replaced text[] NOT NULL DEFAULT '{{}}')"
            ).format(sql.Identifier(schema, table))
        )
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (name text PRIMARY KEY, value text NOT NULL)"
            ).format(meta)
        )
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (name, value) VALUES ('schema_version', %s)"
                " ON CONFLICT (name) DO NOTHING"
            ).format(meta),
            (str(SCHEMA_VERSION),),
        )
        row = conn.execute(
            sql.SQL("SELECT value FROM {} WHERE name = 'schema_version'").format(meta)
        ).fetchone()
        found = int(row[0]) if row else 0
        if found < SCHEMA_VERSION:
            _upgrade(conn, sql.Identifier(schema, table), meta)
            found = SCHEMA_VERSION
    if found > SCHEMA_VERSION:
        raise StoreError(
            f"table {schema}.{table} has layout version {found}; this ctxd reads up to "
            f"{SCHEMA_VERSION} (upgrade ctxd)"
        )


def _upgrade(conn: psycopg.Connection, t: sql.Identifier, meta: sql.Identifier) -> None:
    """Layout 1 to 2 (inside ``ensure``'s transaction): add ``replaced``, so
    a retried write can find itself under a later one. A column with a
    constant default is added without rewriting the table."""
    conn.execute(
        sql.SQL(
            "ALTER TABLE {} ADD COLUMN IF NOT EXISTS replaced text[] NOT NULL DEFAULT '{{}}'"
        ).format(t)
    )
    conn.execute(
        sql.SQL("UPDATE {} SET value = %s WHERE name = 'schema_version'").format(meta),
        (str(SCHEMA_VERSION),),
    )
