"""``postgres://`` (or ``postgresql://``): keys in one PostgreSQL table.

Several sidecars may share one database: each operation is one statement
(a create-only insert, an update or delete guarded by the version, a
byte-ordered range scan), so racing writers either win or fail cleanly. The
URI is libpq's (``postgres://user@host:5432/db``); a password comes from the
URI, ``PGPASSWORD`` or a passfile, as for ``psql``.

Options (URI query, :class:`PostgresOptions`): ``pool_size`` (connections,
default 10), ``statement_timeout`` and ``connect_timeout`` (seconds, default
10 and 5), ``schema`` and ``table`` (default ``public.ctxd_kv``, created on
first start), ``sslmode`` (libpq's), ``notify`` (``true``: send a change
notification with each write so other replicas' watchers wake at once).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ctxd_plugins.postgres.options import PostgresOptions, conninfo_of
from ctxd_sidecar.plugin import Store, hookimpl, store_hooks

if TYPE_CHECKING:
    from ctxd_plugins.postgres.store import PostgresStore

#: Installed by the ``postgres`` extra; imported only when such a store opens.
EXTRA = "pip install '.[postgres]' from a ctxd clone"
SCHEMES = ("postgres", "postgresql")


def open_postgres(uri: str, options: PostgresOptions) -> PostgresStore:
    try:
        from ctxd_plugins.postgres.store import PostgresStore
    except ImportError as exc:
        raise ValueError(
            f"the postgres store needs psycopg and psycopg-pool ({exc.name} is missing): {EXTRA}"
        ) from None
    return PostgresStore(conninfo_of(uri), options)


_served = [store_hooks(scheme, open_postgres, PostgresOptions) for scheme in SCHEMES]


@hookimpl
def ctxd_store_schemes() -> list[str]:
    """Serves ``postgres`` and its libpq alias ``postgresql``."""
    return list(SCHEMES)


@hookimpl
def ctxd_open_store(scheme: str, uri: str, options: Mapping[str, str]) -> Store | None:
    """Opens a postgres:// store; None for other schemes."""
    for hooks in _served:
        store = hooks.ctxd_open_store(scheme=scheme, uri=uri, options=options)
        if store is not None:
            return store
    return None
