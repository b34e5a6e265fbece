"""Raw LMDB floor: durable single-put write txns and single-get read txns.

ctxd's local store sits on LMDB; these rows are what the library costs with
nothing around it (one fsync'd write transaction per put, ~200-byte values),
so ctxd storage figures can be reported as ratios to them. The filesystem
of the scratch directory is recorded because fsync cost depends on it
(pass ``--tmpdir`` to put it on the disk you care about).
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator

from bench.harness import Context, Result, filesystem_of, measure, register

VALUE_BYTES = 200
MAP_SIZE = 1 << 30

PUT = "lmdb.put"
GET = "lmdb.get"


@register("lmdb")
def lmdb_floor(ctx: Context) -> Iterator[Result]:
    import lmdb

    n_put = ctx.pick(full=2000, quick=100)
    warm_put = ctx.pick(full=200, quick=10)
    n_get = ctx.pick(full=20000, quick=500)
    warm_get = ctx.pick(full=2000, quick=50)

    path = ctx.tmpdir(prefix="bench-lmdb-")
    env = lmdb.open(path, map_size=MAP_SIZE, sync=True, metasync=True)
    try:
        value = os.urandom(VALUE_BYTES)
        keys = [b"key-%010d" % i for i in range(n_put + warm_put)]
        common = {
            "value_bytes": VALUE_BYTES,
            "map_size": MAP_SIZE,
            "sync": True,
            "metasync": True,
            "fs": filesystem_of(path),
        }

        put_keys = iter(keys)

        def put() -> None:
            with env.begin(write=True) as txn:
                txn.put(next(put_keys), value)

        yield measure(
            put,
            n_put,
            warm_put,
            name=PUT,
            group="lmdb",
            extra={**common, "txn": "one write txn (fsync on commit) per put"},
        )

        order = keys[:]
        random.Random(0).shuffle(order)
        with env.begin() as txn:
            if txn.get(order[0]) != value:
                raise RuntimeError("lmdb get returned unexpected value")
        get_pos = [0]
        n_keys = len(order)

        def get() -> None:
            i = get_pos[0]
            get_pos[0] = i + 1 if i + 1 < n_keys else 0
            with env.begin() as txn:
                txn.get(order[i])

        yield measure(
            get,
            n_get,
            warm_get,
            name=GET,
            group="lmdb",
            extra={**common, "txn": "one read txn per get", "keys": n_keys},
        )
    finally:
        env.close()
