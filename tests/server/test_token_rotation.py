"""A rotated ``auth_token_file`` takes effect without a restart: the new
token works, the old one keeps working for ``auth_token_grace`` seconds and
is refused after; a file that turns empty keeps the last good token."""

from __future__ import annotations

import os
import time
from pathlib import Path

import grpc

from ctxd_sidecar.api.ctxd.v1 import memory_pb2, memory_pb2_grpc

OLD, NEW, NEWER = "old-token-1111", "new-token-2222", "newer-token-3333"


def code(channel, token: str) -> grpc.StatusCode:
    try:
        memory_pb2_grpc.MemoryServiceStub(channel).List(
            memory_pb2.ListRequest(), metadata=[("authorization", f"Bearer {token}")], timeout=10
        )
        return grpc.StatusCode.OK
    except grpc.RpcError as exc:
        return exc.code()


def until(channel, token: str, want: grpc.StatusCode, seconds: float = 6.0) -> None:
    """Call until the answer is ``want`` (bounded; the file is checked once a second)."""
    deadline = time.monotonic() + seconds
    while (got := code(channel, token)) != want:
        assert time.monotonic() < deadline, f"{token}: still {got}, never {want}"
        time.sleep(0.05)


def rotate(path: Path, token: str) -> None:
    """Replace the file the way a Secret mount or an operator does: write, rename."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(token + "\n")
    os.replace(tmp, path)


def test_a_rotated_token_file_is_followed_with_a_grace_window(spawn_sidecar, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(OLD + "\n")
    sc = spawn_sidecar(
        "--store",
        "memory://",
        "--set",
        f"auth_token_file={token_file}",
        "--set",
        "auth_token_grace=3",
    )
    assert code(sc.channel, OLD) == grpc.StatusCode.OK
    assert code(sc.channel, NEW) == grpc.StatusCode.UNAUTHENTICATED

    rotate(token_file, NEW)
    until(sc.channel, NEW, grpc.StatusCode.OK)
    assert code(sc.channel, OLD) == grpc.StatusCode.OK  # within the grace window
    assert code(sc.channel, "neither") == grpc.StatusCode.UNAUTHENTICATED
    until(sc.channel, OLD, grpc.StatusCode.UNAUTHENTICATED)  # after it
    assert code(sc.channel, NEW) == grpc.StatusCode.OK

    # An empty file (a rotation caught half-way) keeps the last good token.
    token_file.write_text("")
    for _ in range(30):  # calls spanning more than one check of the file
        assert code(sc.channel, NEW) == grpc.StatusCode.OK
        time.sleep(0.05)
    token_file.unlink()
    for _ in range(30):
        assert code(sc.channel, NEW) == grpc.StatusCode.OK
        time.sleep(0.05)
    rotate(token_file, NEWER)
    until(sc.channel, NEWER, grpc.StatusCode.OK)

    assert sc.terminate() == 0
    err = sc.stderr()
    warnings = [line for line in err.splitlines() if "empty or unreadable" in line]
    assert len(warnings) == 1, err[-3000:]
    assert str(tmp_path) not in err and "Traceback" not in err, err[-3000:]
