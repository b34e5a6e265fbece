"""Archives that verify: every compaction records the SHA-256 of the span it
folded, and ExpandCompaction answers exactly those messages after ten
successive compactions, a fork, an export/import and ``ctxd migrate`` to
another store; a damaged archive answers DATA_LOSS (real gRPC, real LMDB,
the damage made through the store plugin API)."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys

import grpc
import pytest

from ctxd_sidecar.admin import transfer
from ctxd_sidecar.admin.client import Client
from ctxd_sidecar.admin.connect import Target
from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.plugin.manager import open_store
from tests.support.contexts import append, assistant, full, tool_text, user

CID = "arch"
ROUNDS = 10


def _fill(stub, cid: str = CID, rounds: int = ROUNDS) -> dict[str, pb.Message]:
    """``rounds`` turns, each followed by a compaction; returns every message
    as it was read before its compaction, by id."""
    seen: dict[str, pb.Message] = {}
    for r in range(rounds):
        append(
            stub,
            cid,
            user(f"round {r}: read /srv/app/r{r}.log and fix E{r:04d}"),
            assistant("", (f"c{r}", "read", json.dumps({"path": f"/srv/app/r{r}.log"}))),
            tool_text(f"c{r}", "read", f"folded-secret-{r:02d} line {r} " + "x" * 40),
            assistant(f"fixed E{r:04d} in r{r}.log (ticket #{1000 + r})"),
            user(f"next {r}"),
            assistant(f"ok {r}"),
        )
        for m in full(stub, cid).messages:
            seen[m.id] = m
        plan = stub.PlanCompaction(pb.PlanCompactionRequest(context_id=cid, keep_last=2))
        assert not plan.nothing_to_do, plan.reason
        answer = f"Round {r}: read /srv/app/r{r}.log, fixed E{r:04d} (ticket #{1000 + r})."
        stub.ApplyCompaction(
            pb.ApplyCompactionRequest(context_id=cid, plan_ref=plan.plan_ref, answer=answer),
            timeout=30,
        )
    return seen


def _expand(stub, cid: str, rec: pb.CompactionRecord, page: int = 3) -> list[pb.Message]:
    req = pb.ExpandCompactionRequest(context_id=cid, compaction_id=rec.id, page_size=page)
    out: list[pb.Message] = []
    while True:
        resp = stub.ExpandCompaction(req, timeout=30)
        assert resp.compaction.folded_sha256 == rec.folded_sha256
        out.extend(resp.messages)
        if not resp.next_page_token:
            return out
        req.page_token = resp.next_page_token


def _all_verify(stub, cid: str, seen: dict[str, pb.Message], records: int) -> list[pb.Message]:
    """Every record of ``cid`` expands to what was appended; returns them all."""
    recs = list(full(stub, cid).compactions)
    assert len(recs) == records
    folded: list[pb.Message] = []
    for rec in recs:
        assert re.fullmatch(r"[0-9a-f]{64}", rec.folded_sha256)
        got = _expand(stub, cid, rec)
        assert len(got) == rec.folded
        assert [m.id for m in got][0] == rec.first_message_id
        assert got == [seen[m.id] for m in got]
        folded.extend(got)
    return folded


@pytest.fixture
def lmdb_uri(tmp_path):
    return lambda name: f"lmdb://{tmp_path / name}?map_size=64MiB"


def test_ten_compactions_a_fork_and_a_migration_keep_every_archive_whole(start_sidecar, lmdb_uri):
    sc = start_sidecar(lmdb_uri("a"), contexts__checkpoint_every=4)
    seen = _fill(sc.contexts)
    folded = _all_verify(sc.contexts, CID, seen, ROUNDS)
    assert [m.id for m in folded] == [f"m{i}" for i in range(1, len(folded) + 1)]
    # No two records hash alike: each covers its own span.
    assert len({r.folded_sha256 for r in full(sc.contexts, CID).compactions}) == ROUNDS

    sc.contexts.ForkContext(pb.ForkContextRequest(source_id=CID, context_id="arch-fork"))
    _all_verify(sc.contexts, "arch-fork", seen, ROUNDS)

    sc.stop()
    proc = subprocess.run(
        [sys.executable, "-m", "ctxd_sidecar", "migrate"]
        + ["--from", lmdb_uri("a"), "--to", lmdb_uri("b")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    moved = start_sidecar(lmdb_uri("b"))
    _all_verify(moved.contexts, CID, seen, ROUNDS)
    _all_verify(moved.contexts, "arch-fork", seen, ROUNDS)


def test_export_and_import_carry_the_folded_messages_byte_for_byte(start_sidecar, lmdb_uri):
    sc = start_sidecar(lmdb_uri("a"), contexts__checkpoint_every=4)
    seen = _fill(sc.contexts, rounds=4)
    folded = _all_verify(sc.contexts, CID, seen, 4)
    dump = io.StringIO()
    with Client(Target(sc.address)) as client:
        assert transfer.write_export(client, [CID], dump) == 1
    header = json.loads(dump.getvalue().splitlines()[0])
    assert len(header["archive"]) == header["folded"] == len(folded)

    other = start_sidecar(lmdb_uri("b"))
    with Client(Target(other.address)) as client:
        for h, messages in transfer.parse(dump.getvalue().splitlines()):
            transfer.import_context(client, h, messages)
    # One compaction folds them all now; its archive is what the source folded.
    recs = list(full(other.contexts, CID).compactions)
    assert len(recs) == 1 and recs[0].folded == len(folded)
    assert _expand(other.contexts, CID, recs[0]) == folded
    again = io.StringIO()
    with Client(Target(other.address)) as client:
        transfer.write_export(client, [CID], again)
    assert json.loads(again.getvalue().splitlines()[0])["archive"] == header["archive"]
    assert again.getvalue().splitlines()[1:] == dump.getvalue().splitlines()[1:]


def test_an_archive_the_target_refuses_imports_with_placeholders(start_sidecar, lmdb_uri):
    """An export whose folded messages would not append as they are (here a
    tool result answering no call) still imports: placeholders stand in, as
    for an export without an archive, and the result says so."""
    sc = start_sidecar(lmdb_uri("a"))
    _fill(sc.contexts, rounds=1)
    dump = io.StringIO()
    with Client(Target(sc.address)) as client:
        transfer.write_export(client, [CID], dump)
    header, *lines = dump.getvalue().splitlines()
    head = json.loads(header)
    head["archive"][0] = {
        "id": "m1",
        "ts_ms": head["archive"][0]["ts_ms"],
        "tool": {"call_id": "nobody", "name": "read", "text": "orphan"},
    }
    other = start_sidecar(lmdb_uri("b"))
    with Client(Target(other.address)) as client:
        [(h, messages)] = transfer.parse([json.dumps(head), *lines])
        out = transfer.import_context(client, h, messages)
    assert out["archive"].startswith("not restored (INVALID_ARGUMENT")
    (rec,) = full(other.contexts, CID).compactions
    got = _expand(other.contexts, CID, rec)
    assert {m.note.text for m in got} == {transfer.PLACEHOLDER}
    assert [m.id for m in full(other.contexts, CID).messages] == [m.id for m in messages]


def _damage(uri: str, old: bytes, new: bytes) -> int:
    """Replace ``old`` by ``new`` (same length) in every stored value that
    holds it, through the store plugin API; returns how many were changed."""
    store = open_store(uri)
    changed = 0
    try:
        for key in store.list(""):
            value = store.get_value(key)
            if value is not None and old in value and "/context-" in f"/{key}":
                store.put(key, value.replace(old, new))
                changed += 1
    finally:
        store.close()
    return changed


def test_a_damaged_archive_answers_data_loss_and_is_never_served(start_sidecar, lmdb_uri):
    sc = start_sidecar(lmdb_uri("a"), contexts__checkpoint_every=4)
    seen = _fill(sc.contexts, rounds=3)
    _all_verify(sc.contexts, CID, seen, 3)
    sc.stop()
    assert _damage(lmdb_uri("a"), b"folded-secret-01", b"folded-secreT-01") >= 1

    again = start_sidecar(lmdb_uri("a"))
    recs = list(full(again.contexts, CID).compactions)
    # The first and the last folded spans are intact and still served.
    for rec in (recs[0], recs[2]):
        got = _expand(again.contexts, CID, rec)
        assert got == [seen[m.id] for m in got] and len(got) == rec.folded
    for page in (1, 1000):  # the first page as any other
        with pytest.raises(grpc.RpcError) as err:
            _expand(again.contexts, CID, recs[1], page=page)
        assert err.value.code() == grpc.StatusCode.DATA_LOSS
        detail = err.value.details()
        assert recs[1].id in detail and "SHA-256" in detail and "Restore" in detail
    # An export refuses too, rather than carry the damage on.
    with Client(Target(again.address)) as client, pytest.raises(Exception, match="DATA_LOSS"):
        transfer.write_export(client, [CID], io.StringIO())


def test_a_record_without_a_hash_is_served_as_before(start_sidecar, lmdb_uri):
    """Records written before the hash existed carry none: served unchecked."""
    sc = start_sidecar(lmdb_uri("a"), contexts__checkpoint_every=4)
    seen = _fill(sc.contexts, rounds=2)
    sc.stop()
    store = open_store(lmdb_uri("a"))
    try:
        for key in store.list(""):
            value = store.get_value(key)
            if value is not None and b'"sha":"' in value:
                store.put(key, re.sub(rb',?"sha":"[0-9a-f]{64}"', b"", value))
    finally:
        store.close()
    again = start_sidecar(lmdb_uri("a"))
    recs = list(full(again.contexts, CID).compactions)
    assert [r.folded_sha256 for r in recs] == ["", ""]
    for rec in recs:
        got = _expand(again.contexts, CID, rec)
        assert got == [seen[m.id] for m in got] and len(got) == rec.folded
