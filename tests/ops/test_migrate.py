"""``ctxd migrate`` copies contexts and memory between stores, verified and resumable."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as cpb
from ctxd_sidecar.api.ctxd.v1 import memory_pb2 as mpb


def _fill(sc) -> dict:
    """Write a few conversations (some past a checkpoint) and memory keys."""
    expected: dict = {"contexts": {}, "memory": {}}
    for c in range(3):
        cid = f"conv-{c}"
        for t in range(40 if c == 0 else 3):
            resp = sc.contexts.AppendTurn(
                cpb.AppendTurnRequest(
                    context_id=cid,
                    messages=[
                        cpb.Message(user=cpb.UserMessage(text=f"q{t} {'x' * 50}")),
                        cpb.Message(assistant=cpb.AssistantMessage(text=f"a{t}")),
                    ],
                ),
                timeout=10,
            )
        expected["contexts"][cid] = resp.version
    for k in range(25):
        value = json.dumps({"n": 10**25 + k, "name": f"ключ-{k}"}, ensure_ascii=False)
        sc.memory.Set(mpb.SetRequest(key=f"facts/{k:03}", value_json=value), timeout=10)
        expected["memory"][f"facts/{k:03}"] = value
    sc.memory.Set(mpb.SetRequest(key="soon/gone", value_json="1", ttl_seconds=1), timeout=10)
    return expected


def _migrate(src: str, dst: str, *extra: str) -> tuple[int, dict | str]:
    proc = subprocess.run(
        [sys.executable, "-m", "ctxd_sidecar", "migrate", "--from", src, "--to", dst, *extra],
        capture_output=True,
        text=True,
        timeout=300,
    )
    try:
        return proc.returncode, json.loads(proc.stdout)
    except json.JSONDecodeError:
        return proc.returncode, proc.stderr


def _check(sc, expected: dict) -> None:
    for cid, version in expected["contexts"].items():
        ctx = sc.contexts.GetContext(cpb.GetContextRequest(context_id=cid), timeout=10).context
        assert ctx.version == version
    listed = sc.contexts.ListContexts(cpb.ListContextsRequest(), timeout=10).contexts
    assert {c.id for c in listed} >= set(expected["contexts"])
    for key, value in expected["memory"].items():
        assert sc.memory.Get(mpb.GetRequest(key=key), timeout=10).record.value_json == value
    keys = [r.key for r in sc.memory.List(mpb.ListRequest(limit=1000), timeout=10).records]
    assert keys == sorted(expected["memory"])


@pytest.mark.parametrize(
    "chain",
    [
        ("lmdb", "s3", "lmdb"),
        ("lmdb", "s3-nolist", "memory-lmdb"),
        # With the two below, every direction between LMDB, S3 and PostgreSQL.
        ("lmdb", "postgres", "s3", "lmdb"),
        ("lmdb", "s3", "postgres", "lmdb"),
    ],
    ids="-".join,
)
def test_migrate_lmdb_to_s3_and_back(start_sidecar, store_uri_for, chain):
    uris = [store_uri_for("lmdb" if b == "memory-lmdb" else b) for b in chain]
    # No sweeper, so the expired record is still in the source for migrate to skip.
    first = start_sidecar(uris[0], contexts__checkpoint_every=8, memory__sweep_interval=0)
    expected = _fill(first)
    first.extra["handle"].close()
    time.sleep(1.1)  # let "soon/gone" expire

    for hop, (src, dst) in enumerate(zip(uris, uris[1:], strict=False)):
        code, report = _migrate(src, dst)
        assert code == 0, report
        assert report["ok"] and report["contexts_verified"] == 4  # root + 3 conversations
        # The expired record is left behind by the first hop.
        assert report["memory_keys"] == 25
        assert report["memory_expired_skipped"] == (1 if hop == 0 else 0)
        assert report["keys_copied"] > 0 and report["keys_already_present"] == 0

        # Resumable: a second run finds everything in place.
        code, again = _migrate(src, dst)
        assert code == 0 and again["keys_copied"] == 0 and again["keys_already_present"] > 0

    last = start_sidecar(uris[-1])
    _check(last, expected)


def test_migrate_refuses_to_overwrite_different_data(start_sidecar, store_uri_for):
    src, dst = store_uri_for("lmdb"), store_uri_for("lmdb")
    a = start_sidecar(src)
    a.memory.Set(mpb.SetRequest(key="k", value_json='"source"'), timeout=10)
    a.extra["handle"].close()
    b = start_sidecar(dst)
    b.memory.Set(mpb.SetRequest(key="k", value_json='"destination"'), timeout=10)
    b.extra["handle"].close()

    code, err = _migrate(src, dst)
    assert code == 1 and "different data" in err and "--overwrite" in err
    code, report = _migrate(src, dst, "--overwrite")
    assert code == 0 and report["keys_overwritten"] >= 1
    c = start_sidecar(dst)
    assert c.memory.Get(mpb.GetRequest(key="k"), timeout=10).record.value_json == '"source"'


def test_migrate_with_a_bad_uri_is_a_clear_error(tmp_path):
    code, err = _migrate("nosuch://x", f"lmdb://{tmp_path}/d")
    assert code == 2 and "no store plugin serves scheme 'nosuch'" in err


def _turn(sc, cid: str, text: str) -> int:
    return sc.contexts.AppendTurn(
        cpb.AppendTurnRequest(
            context_id=cid, messages=[cpb.Message(user=cpb.UserMessage(text=text))]
        ),
        timeout=10,
    ).version


def _snapshot(sc, cids) -> dict:
    """Each context as the destination serves it: version and every message."""
    out = {}
    for cid in cids:
        ctx = sc.contexts.GetContext(cpb.GetContextRequest(context_id=cid), timeout=10).context
        out[cid] = (ctx.version, [m.SerializeToString(deterministic=True) for m in ctx.messages])
    listed = {
        c.id for c in sc.contexts.ListContexts(cpb.ListContextsRequest(), timeout=10).contexts
    }
    return {"contexts": out, "listed": listed >= set(cids)}


@pytest.mark.parametrize("backend", ["lmdb", "s3-nolist", "s3"])
def test_overwrite_replaces_a_context_that_took_more_turns_whole(
    start_sidecar, store_uri_for, backend
):
    src, dst = store_uri_for("lmdb"), store_uri_for(backend)
    a = start_sidecar(src, contexts__checkpoint_every=8, memory__sweep_interval=0)
    expected = _fill(a)
    want = _snapshot(a, expected["contexts"])
    a.extra["handle"].close()
    code, report = _migrate(src, dst)
    assert code == 0 and report["ok"], report

    # The destination takes more turns: one past a checkpoint, one in the tail.
    b = start_sidecar(dst, contexts__checkpoint_every=8)
    for _ in range(9):
        _turn(b, "conv-0", "only at the destination")
    _turn(b, "conv-1", "only at the destination")
    b.extra["handle"].close()

    code, err = _migrate(src, dst)
    assert code == 1 and "--overwrite" in err
    code, report = _migrate(src, dst, "--overwrite")
    assert code == 0 and report["ok"] and report["contexts_verified"] == 4, report
    assert report["keys_removed"] >= 1
    code, again = _migrate(src, dst, "--overwrite")  # converged: nothing left to change
    assert code == 0 and again["ok"], again
    assert again["keys_overwritten"] == again["keys_removed"] == again["keys_copied"] == 0

    c = start_sidecar(dst)
    assert _snapshot(c, expected["contexts"]) == want
    assert _turn(c, "conv-1", "after the migration") == want["contexts"]["conv-1"][0] + 1


def test_migrate_from_a_missing_source_refuses_and_creates_nothing(tmp_path):
    missing, dst = tmp_path / "mistyped", tmp_path / "dst"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ctxd_sidecar",
            "migrate",
            "--from",
            f"lmdb://{missing}",
            "--to",
            f"lmdb://{dst}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "does not exist" in proc.stderr, proc.stderr
    assert not missing.exists() and not dst.exists()


def test_migrate_from_a_source_a_sidecar_holds_says_so_in_one_line(
    start_sidecar, store_uri_for, tmp_path
):
    src = store_uri_for("lmdb")
    held = start_sidecar(src)
    _turn(held, "c", "hello")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ctxd_sidecar",
            "migrate",
            "--from",
            src,
            "--to",
            f"lmdb://{tmp_path}/dst",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "in use by another ctxd process" in proc.stderr and "Traceback" not in proc.stderr


def test_a_migrated_fork_is_still_a_fork_and_outlives_its_source(start_sidecar, store_uri_for):
    src, dst = store_uri_for("lmdb"), store_uri_for("s3")
    first = start_sidecar(src, contexts__checkpoint_every=3)
    for i in range(8):
        first.contexts.AppendTurn(
            cpb.AppendTurnRequest(
                context_id="trunk", messages=[cpb.Message(user=cpb.UserMessage(text=f"t{i}"))]
            )
        )
    first.contexts.ForkContext(
        cpb.ForkContextRequest(source_id="trunk", at_version=6, context_id="branch")
    )
    first.extra["handle"].close()
    code, report = _migrate(src, dst)
    assert code == 0, json.dumps(report)
    last = start_sidecar(dst, contexts__fence_hold=0)
    info = last.contexts.GetContext(cpb.GetContextRequest(context_id="branch")).info
    assert (info.forked_from, info.forked_at_version) == ("trunk", 6)
    last.contexts.DeleteContext(cpb.DeleteContextRequest(context_id="trunk"))
    svc = last.extra["sidecar"].domain.contexts
    assert last.extra["handle"].call(svc.janitor.drain(60))
    ctx = last.contexts.GetContext(cpb.GetContextRequest(context_id="branch")).context
    assert [m.user.text for m in ctx.messages] == [f"t{i}" for i in range(6)]
