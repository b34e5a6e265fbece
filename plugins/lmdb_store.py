"""``lmdb://PATH``: the embedded default store.

One LMDB environment, fsync on every commit, a large sparse map. Write
transactions all run on one dedicated thread (LMDB allows one writer at a
time, and this keeps the sidecar's event loop off the disk); reads are
memory-mapped and run wherever they are called.

Options (URI query): ``map_size`` (bytes, or with a KiB/MiB/GiB/TiB suffix;
default 64GiB, sparse, so it costs nothing until used).
"""

from __future__ import annotations

import concurrent.futures
import os
import re
from collections.abc import Mapping
from urllib.parse import unquote, urlsplit

import lmdb

from plugins.memory_store import content_version
from sidecar.hookspecs import hookimpl
from sidecar.store import (
    Capability,
    Item,
    PreconditionFailed,
    Store,
    StoreError,
    StoreFull,
)

DEFAULT_MAP_SIZE = 64 << 30
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([kmgt]?)(?:i?b)?\s*", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"invalid size {text!r}; use bytes or e.g. 64GiB")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


class LmdbStore(Store):
    name = "lmdb"
    capabilities = frozenset({Capability.LIST, Capability.DELETE, Capability.CONDITIONAL_PUT})
    inline_reads = True
    max_key_bytes = 511  # LMDB's compiled-in MDB_MAXKEYSIZE

    def __init__(self, path: str, map_size: int = DEFAULT_MAP_SIZE) -> None:
        os.makedirs(path, exist_ok=True)
        self.path = path
        self.map_size = map_size
        try:
            self.env = lmdb.open(
                path, map_size=map_size, subdir=True, sync=True, metasync=True,
                max_dbs=0, readahead=False, max_readers=256,
            )
        except lmdb.Error as exc:
            raise StoreError(f"cannot open LMDB environment: {type(exc).__name__}") from None
        self.env.reader_check()  # clear slots left by crashed processes
        self._writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="lmdb-writer")

    # -- reads --------------------------------------------------------------
    def get(self, key: str) -> Item | None:
        with self.env.begin(buffers=False) as txn:
            value = txn.get(key.encode())
        return None if value is None else Item(value, content_version(value))

    def list(self, prefix, *, start_after="", limit=None) -> list[str]:
        bprefix, bafter = prefix.encode(), start_after.encode()
        out: list[str] = []
        with self.env.begin() as txn, txn.cursor() as cur:
            if not cur.set_range(max(bprefix, bafter)):
                return out
            for key in cur.iternext(keys=True, values=False):
                if not key.startswith(bprefix) or (limit is not None and len(out) >= limit):
                    break
                if key == bafter:
                    continue
                out.append(key.decode())
        return out

    # -- writes (all on the writer thread) -----------------------------------
    def _write(self, fn, *args):
        return self._writer.submit(self._in_txn, fn, *args).result()

    def _in_txn(self, fn, *args):
        try:
            with self.env.begin(write=True) as txn:
                return fn(txn, *args)
        except lmdb.MapFullError:
            raise StoreFull(
                f"LMDB map is full ({self.map_size} bytes); raise map_size in the store URI"
            ) from None
        except lmdb.ReadonlyError:
            raise StoreError("LMDB environment is read-only") from None
        except lmdb.Error as exc:
            raise StoreError(f"LMDB write failed: {type(exc).__name__}") from None

    def put(self, key, value, *, if_version=None, if_absent=False) -> str:
        return self._write(self._put, key.encode(), bytes(value), if_version, if_absent)

    @staticmethod
    def _put(txn, key, value, if_version, if_absent):
        if if_absent or if_version is not None:
            _check(txn.get(key), if_version, if_absent)
        txn.put(key, value)
        return content_version(value)

    def delete(self, key, *, if_version=None) -> None:
        self._write(self._delete, key.encode(), if_version)

    @staticmethod
    def _delete(txn, key, if_version):
        if if_version is not None:
            _check(txn.get(key), if_version, False)
        txn.delete(key)

    # -- lifecycle ------------------------------------------------------------
    def flush(self) -> None:
        self.env.sync(True)

    def close(self) -> None:
        self._writer.shutdown(wait=True)
        self.env.close()

    def describe(self) -> str:
        return f"lmdb (map_size={self.map_size})"


def _check(current: bytes | None, if_version: str | None, if_absent: bool) -> None:
    if if_absent and current is not None:
        raise PreconditionFailed("key already exists")
    if if_version is not None and (current is None or content_version(current) != if_version):
        raise PreconditionFailed("version does not match")


@hookimpl
def ctxd_store_schemes() -> list[str]:
    return ["lmdb"]


@hookimpl
def ctxd_open_store(scheme: str, uri: str, options: Mapping[str, str]) -> Store | None:
    if scheme != "lmdb":
        return None
    parts = urlsplit(uri)
    path = unquote(parts.netloc + parts.path)
    if not path:
        raise ValueError("lmdb store URI needs a path, e.g. lmdb:///var/lib/ctxd")
    map_size = parse_size(options["map_size"]) if "map_size" in options else DEFAULT_MAP_SIZE
    return LmdbStore(path, map_size=map_size)
