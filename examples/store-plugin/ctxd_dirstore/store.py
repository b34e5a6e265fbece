"""DirStore: one file per key, written by atomic rename.

Layout under the root directory::

    data/<hex of the key's UTF-8 bytes>   one file per key, the value as is
    tmp/                                  files being written
    lock                                  serialises writers (flock)

Hex file names make any key a safe file name (``/``, ``..``, NUL-free,
case-insensitive file systems), and sorting the names sorts the keys in byte
order, which is the order LIST must return.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from ctxd_sidecar.plugin import (
    Capability,
    Item,
    Store,
    StoreError,
    StoreFull,
    check_precondition,
    content_version,
)

#: Temporary files older than this are left over from a crash and removed on open.
_STALE_TMP_SECONDS = 3600


class DirStore(Store):
    name = "dir"
    # Two hex characters per key byte in a file name of at most 255 bytes.
    max_key_bytes = 127

    def __init__(self, root: str | os.PathLike[str], *, locking: bool = True) -> None:
        self.root = Path(root)
        self.locking = locking
        self._data = self.root / "data"
        self._tmp = self.root / "tmp"
        self._lock_path = self.root / "lock"
        # What this store can do depends on how it was opened, so the
        # capabilities are set per instance. Declare only what holds:
        # without the lock, compare-and-set is not atomic across processes.
        caps = {Capability.LIST, Capability.DELETE}
        if locking:
            caps.add(Capability.CONDITIONAL_PUT)
        self.capabilities = frozenset(caps)
        with self._errors():
            self._data.mkdir(parents=True, exist_ok=True)
            self._tmp.mkdir(exist_ok=True)
            self._remove_stale_temporaries()

    # -- reads: no lock needed, a rename replaces a file in one step ---------------
    def get(self, key: str) -> Item | None:
        with self._errors():
            return _item(self._path(key))

    def list(self, prefix: str, *, start_after: str = "", limit: int | None = None) -> list[str]:
        hex_prefix, hex_after = prefix.encode().hex(), start_after.encode().hex()
        with self._errors():
            names = sorted(
                name
                for name in os.listdir(self._data)
                if name.startswith(hex_prefix) and name > hex_after
            )
        return [bytes.fromhex(name).decode() for name in names[:limit]]

    # -- writes -------------------------------------------------------------------
    def put(
        self, key: str, value: bytes, *, if_version: str | None = None, if_absent: bool = False
    ) -> str:
        conditional = if_version is not None or if_absent
        if conditional and not self.locking:
            # Refuse rather than ignore a precondition we cannot honour.
            raise NotImplementedError("this dir store was opened with locking=false")
        path = self._path(key)
        with self._errors(), self._writer():
            if conditional:
                check_precondition(_item(path), if_version, if_absent)
            self._replace(path, bytes(value))
        return content_version(value)

    def delete(self, key: str, *, if_version: str | None = None) -> None:
        if if_version is not None and not self.locking:
            raise NotImplementedError("this dir store was opened with locking=false")
        path = self._path(key)
        with self._errors(), self._writer():
            if if_version is not None:
                check_precondition(_item(path), if_version, False)
            try:
                path.unlink()
            except FileNotFoundError:
                return
            _fsync_dir(self._data)

    def describe(self) -> str:
        return "dir" if self.locking else "dir (locking=false)"

    # -- helpers --------------------------------------------------------------------
    def _path(self, key: str) -> Path:
        return self._data / key.encode().hex()

    def _replace(self, path: Path, value: bytes) -> None:
        """Write to a temporary file, fsync it, rename it over ``path``, fsync
        the directory: after a crash the key holds the old or the new value."""
        fd, tmp = tempfile.mkstemp(dir=self._tmp)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(value)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        _fsync_dir(self._data)

    @contextlib.contextmanager
    def _writer(self) -> Iterator[None]:
        """Hold the store's write lock: one writer at a time, across threads
        and processes (each call opens its own descriptor, so flock also
        excludes other threads of this process)."""
        if not self.locking:
            yield
            return
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        """Turn OS errors into store errors; ctxd maps those to gRPC codes.
        Messages name the problem, never a path."""
        try:
            yield
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise StoreFull("the dir store's file system is full") from None
            reason = errno.errorcode.get(exc.errno, type(exc).__name__)
            raise StoreError(f"dir store I/O failed ({reason})") from None

    def _remove_stale_temporaries(self) -> None:
        cutoff = time.time() - _STALE_TMP_SECONDS
        for tmp in self._tmp.iterdir():
            with contextlib.suppress(FileNotFoundError):
                if tmp.stat().st_mtime < cutoff:
                    tmp.unlink()


def _item(path: Path) -> Item | None:
    """The key's value and its content version, or ``None`` if absent."""
    try:
        value = path.read_bytes()
    except FileNotFoundError:
        return None
    return Item(value, content_version(value))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
