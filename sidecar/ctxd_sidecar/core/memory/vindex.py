"""The in-process vector index memory search ranks with.

It holds every live record's vectors by key (one row per field) and ranks
the rows under a key prefix against a query: exactly with NumPy when it is
installed (pure Python otherwise, fine for small memories), and
approximately with usearch's HNSW graph (the ``search`` extra) once the
rows to rank exceed ``approx_threshold``. It only proposes: the search
re-reads every proposed record from the store, so what another replica
deleted or rewrote is never returned stale (see
:mod:`ctxd_sidecar.core.memory.search`).
"""

from __future__ import annotations

import bisect
import logging
import os
from array import array
from collections.abc import Iterable

from ctxd_sidecar.core.memory.vectors import Vectors, norm, score

# A query is one matrix-vector product: BLAS threads cost more in wake-ups
# than they save (0.3 ms against 24 ms per query at 5,000 vectors on a busy
# 2-core machine), so the sidecar asks for one unless told otherwise.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
try:  # the ``search`` extra; exact search in pure Python without it
    import numpy as np
except ImportError:  # pragma: no cover - exercised where numpy is absent
    np = None

log = logging.getLogger(__name__)

#: A ranked candidate: (key, score, field, the version the score is of).
Hit = tuple[str, float, str, str]


def approx_available() -> bool:
    try:
        import usearch.index  # noqa: F401
    except ImportError:
        return False
    return np is not None


class VectorIndex:
    """Rows of vectors by record key; ``ranked`` proposes the best records."""

    def __init__(self, metric: str, *, approx_threshold: int = 20_000) -> None:
        self.metric = metric
        self.approx_threshold = approx_threshold
        self.dims = 0
        self._rows: list[tuple[str, str] | None] = []  # row -> (key, field)
        self._free: list[int] = []
        self._keys: dict[str, tuple[str, list[int]]] = {}  # key -> (version, rows)
        self._sorted: list[str] = []
        self._vecs: list[array | None] = []  # without numpy
        self._mat = None  # with numpy: capacity x dims float32
        self._ann = None

    def __len__(self) -> int:
        return len(self._keys)

    @property
    def rows(self) -> int:
        return len(self._rows) - len(self._free)

    def version(self, key: str) -> str | None:
        entry = self._keys.get(key)
        return None if entry is None else entry[0]

    def nbytes(self) -> int:
        """Bytes the vectors and the approximate graph take."""
        size = self.rows * self.dims * 4
        if self._ann is not None:
            size += int(self._ann.memory_usage)
        return size

    # -- changes -------------------------------------------------------------------
    def put(self, key: str, version: str, vectors: Vectors) -> None:
        self.drop(key)
        if not vectors:
            return
        rows = [self._add_row(key, f, v) for f, v in vectors.items() if len(v) == self.dims]
        if rows:
            self._keys[key] = (version, rows)
            bisect.insort(self._sorted, key)

    def load(self, entries: Iterable[tuple[str, str, Vectors]]) -> None:
        """Replace everything with ``entries`` (key, version, vectors)."""
        dims = self.dims
        entries = list(entries)
        self.__init__(self.metric, approx_threshold=self.approx_threshold)
        self.dims = dims
        if np is not None and dims:
            rows = sum(len(v) for _, _, v in entries)
            self._mat = np.zeros((max(64, rows), dims), dtype=np.float32)
        for key, version, vectors in entries:
            rows = [self._add_row(key, f, v) for f, v in vectors.items() if len(v) == dims]
            if rows:
                self._keys[key] = (version, rows)
        self._sorted = sorted(self._keys)
        self._maybe_build_ann()

    def drop(self, key: str) -> None:
        entry = self._keys.pop(key, None)
        if entry is None:
            return
        i = bisect.bisect_left(self._sorted, key)
        if i < len(self._sorted) and self._sorted[i] == key:
            del self._sorted[i]
        for row in entry[1]:
            self._rows[row] = None
            self._free.append(row)
            if self._ann is not None:
                self._ann.remove(row)

    def _add_row(self, key: str, field: str, vec: array) -> int:
        row = self._free.pop() if self._free else len(self._rows)
        if row == len(self._rows):
            self._rows.append((key, field))
            self._vecs.append(None)
        else:
            self._rows[row] = (key, field)
        if np is None:
            self._vecs[row] = vec
            return row
        v = np.frombuffer(vec, dtype=np.float32)
        if self.metric == "cosine":
            n = float(np.linalg.norm(v))
            v = v / n if n else v
        if self._mat is None or row >= len(self._mat):
            grown = np.zeros((max(64, 2 * row), self.dims), dtype=np.float32)
            if self._mat is not None:
                grown[: len(self._mat)] = self._mat
            self._mat = grown
        self._mat[row] = v
        if self._ann is not None:
            self._ann.add(row, self._mat[row])
        elif self.rows > self.approx_threshold:
            self._maybe_build_ann()
        return row

    def _maybe_build_ann(self) -> None:
        if self.rows > self.approx_threshold and approx_available():
            self._ann = build_ann(self.metric, self.dims, self._rows, self._mat)

    # -- ranking -------------------------------------------------------------------
    def _rows_under(self, prefix: str) -> list[int] | None:
        """Rows of the keys under ``prefix``; None for every row."""
        if not prefix:
            return None
        lo = bisect.bisect_left(self._sorted, prefix)
        hi = bisect.bisect_left(self._sorted, prefix + "\U0010ffff")
        if lo == 0 and hi == len(self._sorted):
            return None
        return [row for key in self._sorted[lo:hi] for row in self._keys[key][1]]

    def ranked(self, prefix: str, query: array, fields: tuple[str, ...], want: int) -> list[Hit]:
        """At least ``want`` records under ``prefix`` (when there are), best
        first, each once (best field, version scored); more may follow."""
        if not self._keys or len(query) != self.dims:
            return []
        rows = self._rows_under(prefix)
        count = self.rows if rows is None else len(rows)
        if self._ann is not None and count > self.approx_threshold:
            hits = self._ranked_ann(prefix, query, fields, want, count)
            if hits is not None:
                return hits
        if np is None:
            return self._ranked_python(rows, query, fields)
        return self._ranked_numpy(rows, query, fields, want)

    def _pool(self, pairs: Iterable[tuple[int, float]], fields, prefix: str = "") -> list[Hit]:
        seen: set[str] = set()
        out: list[Hit] = []
        for row, s in pairs:
            slot = self._rows[row] if 0 <= row < len(self._rows) else None
            if slot is None or slot[0] in seen or not slot[0].startswith(prefix):
                continue
            if fields and slot[1].partition("#")[0] not in fields:
                continue
            seen.add(slot[0])
            out.append((slot[0], float(s), slot[1], self._keys[slot[0]][0]))
        return out

    def _ranked_python(self, rows, query, fields) -> list[Hit]:
        qn = norm(query)
        rows = range(len(self._rows)) if rows is None else rows
        scored = [
            (r, score(self.metric, query, self._vecs[r], qn))
            for r in rows
            if self._rows[r] is not None
        ]
        scored.sort(key=lambda p: -p[1])
        return self._pool(scored, fields)

    def _query(self, query: array):
        q = np.frombuffer(query, dtype=np.float32)
        if self.metric == "cosine":
            n = float(np.linalg.norm(q))
            q = q / n if n else q
        return q

    def _scores(self, mat, q):
        if self.metric == "l2":
            return -np.sqrt(np.maximum(((mat - q) ** 2).sum(axis=1), 0.0))
        return mat @ q

    def _ranked_numpy(self, rows, query, fields, want) -> list[Hit]:
        q = self._query(query)
        n = len(self._rows)
        if rows is None:
            ids = np.arange(n)
            scores = self._scores(self._mat[:n], q)
        else:
            ids = np.asarray(rows, dtype=np.int64)
            scores = self._scores(self._mat[ids], q)
        take = min(len(ids), max(4 * want, 32))
        while True:
            if take < len(ids):
                top = np.argpartition(-scores, take - 1)[:take]
            else:
                top = np.arange(len(ids))
            top = top[np.argsort(-scores[top], kind="stable")]
            hits = self._pool(zip(ids[top].tolist(), scores[top].tolist(), strict=True), fields)
            if len(hits) >= want or take >= len(ids):
                return hits
            take = min(len(ids), take * 4)

    def _ranked_ann(self, prefix, query, fields, want, count) -> list[Hit] | None:
        q = self._query(query)
        k = max(4 * want, 64)
        while k <= max(count // 4, 64):
            found = self._ann.search(q, min(k, self.rows))
            keys, dists = found.keys.tolist(), found.distances.tolist()
            if self.metric == "l2":
                scores = [-(max(d, 0.0) ** 0.5) for d in dists]
            else:
                scores = [1.0 - d for d in dists]
            hits = self._pool(zip(keys, scores, strict=True), fields, prefix)
            if len(hits) >= want or len(keys) >= self.rows:
                return hits
            k *= 4
        return None  # the prefix is too sparse in the graph: rank exactly


#: The HNSW graph's shape. Measured on 100,000 clustered 384-dimension
#: vectors (bench/ctxd_memory_search.py's): 16 links and a search width of
#: 256 found 0.84 of the exact top 10 in 1.2 ms; 32 links and 512 find 0.98
#: in 3.4 ms, for 12% more memory.
CONNECTIVITY, EXPANSION_ADD, EXPANSION_SEARCH = 32, 128, 512


def build_ann(metric: str, dims: int, rows: list, mat):
    """usearch's HNSW graph over the live ``rows`` of ``mat`` (keys: row numbers)."""
    from usearch.index import Index

    kind = {"cosine": "ip", "dot": "ip", "l2": "l2sq"}[metric]
    ann = Index(
        ndim=dims,
        metric=kind,
        dtype="f32",
        connectivity=CONNECTIVITY,
        expansion_add=EXPANSION_ADD,
    )
    live = np.array([i for i, r in enumerate(rows) if r is not None], dtype=np.uint64)
    if len(live):
        ann.add(live, mat[live.astype(np.int64)])
    ann.expansion_search = EXPANSION_SEARCH
    log.info("memory search index built", extra={"rows": len(live)})
    return ann
