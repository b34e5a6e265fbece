"""``ctxd migrate --dry-run`` counts and writes nothing; progress goes to stderr."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import boto3

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as cpb
from ctxd_sidecar.api.ctxd.v1 import memory_pb2 as mpb

CTXD = str(Path(sys.executable).with_name("ctxd"))


def _migrate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CTXD, "migrate", *args], capture_output=True, text=True, timeout=300)


def _source(start_sidecar, uri: str) -> None:
    sc = start_sidecar(uri)
    for c in range(3):
        sc.contexts.AppendTurn(
            cpb.AppendTurnRequest(
                context_id=f"conv-{c}",
                messages=[cpb.Message(user=cpb.UserMessage(text=f"hello {c}"))],
            ),
            timeout=10,
        )
    for k in range(7):
        sc.memory.Set(mpb.SetRequest(key=f"facts/{k}", value_json=str(k)), timeout=10)
    sc.extra["handle"].close()


def test_dry_run_counts_and_writes_nothing(start_sidecar, store_uri_for, moto_endpoint, tmp_path):
    src = store_uri_for("lmdb")
    _source(start_sidecar, src)
    dst = store_uri_for("s3")
    bucket = dst.split("/")[2]
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")

    dry = _migrate("--from", src, "--to", dst, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    report = json.loads(dry.stdout)
    assert report["dry_run"] is True and report["ok"] is True
    assert report["contexts"] == 4 and report["memory_keys"] == 7  # root + 3 conversations
    assert report["keys_copied"] > 0 and report["contexts_verified"] == 0
    assert s3.list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0
    # Progress: count/total and a rate, on stderr, ending at the total.
    last = dry.stderr.strip().splitlines()[-1]
    assert last.startswith("migrate: 11/11 (100%)") and last.endswith("/s")

    # A missing LMDB destination is not created by a dry run.
    absent = tmp_path / "not-yet"
    assert _migrate("--from", src, "--to", f"lmdb://{absent}", "--dry-run").returncode == 0
    assert not absent.exists()

    real = _migrate("--from", src, "--to", dst, "--no-progress")
    assert real.returncode == 0 and real.stderr == ""
    copied = json.loads(real.stdout)
    assert copied["keys_copied"] == report["keys_copied"]
    assert copied["contexts_verified"] == 4

    # After the copy a dry run finds everything present.
    again = json.loads(_migrate("--from", src, "--to", dst, "--dry-run").stdout)
    assert again["keys_copied"] == 0 and again["keys_already_present"] == report["keys_copied"]
