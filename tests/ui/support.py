"""What the browser tests read: conversations written through the public API
of a real sidecar, and ``ctxd ui`` as the console script in a subprocess."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.api.ctxd.v1 import memory_pb2 as mpb
from tests.conftest import free_port

CTXD = str(Path(sys.executable).with_name("ctxd"))
#: A transcript that would run script if the page put text in as markup.
HOSTILE = '<script>alert("x")</script> <img src=x onerror="alert(1)">'
BIG = "big:20k"
BIG_MESSAGES = 20_000
TOKEN = "ui-test-token"


def user(text: str) -> pb.Message:
    return pb.Message(user=pb.UserMessage(text=text))


def assistant(text: str, *calls: pb.ToolCall) -> pb.Message:
    return pb.Message(assistant=pb.AssistantMessage(text=text, tool_calls=list(calls)))


def result(call_id: str, text: str, name: str = "read_file") -> pb.Message:
    return pb.Message(tool=pb.ToolResult(call_id=call_id, name=name, text=text))


def _append(stub, cid: str, messages, metadata=(), **kw) -> None:
    stub.AppendTurn(
        pb.AppendTurnRequest(context_id=cid, messages=messages, **kw),
        metadata=metadata,
        timeout=60,
    )


def seed_demo(stub, cid: str = "demo:tools", metadata=(), extra: str = "") -> None:
    """Six rounds with a tool call each (``extra`` added to each question),
    then a compaction folding all but the last round."""
    for i in range(6):
        call = pb.ToolCall(
            id=f"call{i}", name="read_file", arguments_json=json.dumps({"path": f"/src/a{i}.py"})
        )
        _append(
            stub,
            cid,
            [
                user(f"round {i}: what does /src/a{i}.py return? {extra}".strip()),
                assistant(f"reading a{i}", call),
                result(f"call{i}", f"def f{i}(): return {i}  # folded-text-{i}"),
                assistant(f"answer {i}"),
            ],
            metadata,
            model_window=4000,
        )
    stub.Compact(pb.CompactRequest(context_id=cid, keep_last=4), metadata=metadata, timeout=60)
    # The provider's usage of the next call: 900 of 1200 input tokens cached.
    usage = pb.RecordUsageRequest(
        context_id=cid, input_tokens=1200, cached_input_tokens=900, cache_write_tokens=200
    )
    stub.RecordUsage(usage, metadata=metadata, timeout=10)


def seed_native(stub, cid: str = "demo:native") -> None:
    """A Responses reasoning item kept as the writer sent it, beside its note."""
    item = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "thinking about the request"}],
        "encrypted_content": "gAAAA-opaque",
    }
    note = pb.Message(
        note=pb.NoteMessage(text="[reasoning] thinking about the request"),
        native=pb.NativePayload(format="openai.responses.item", data=json.dumps(item).encode()),
    )
    _append(stub, cid, [user("plan the migration"), note, assistant("first, a dry run")])


def seed_big(stub, cid: str = BIG, n: int = BIG_MESSAGES) -> None:
    """``n`` messages, user and assistant in turn, 250 to a turn."""
    for start in range(0, n, 250):
        batch = [
            (user if i % 2 == 0 else assistant)(f"message {i} of the long conversation")
            for i in range(start, min(n, start + 250))
        ]
        _append(stub, cid, batch, model_window=10_000_000)


def seed_list(stub, count: int = 60) -> None:
    for i in range(count):
        _append(stub, f"list:{i:03d}", [user(f"hello {i}")])


def seed_memory(mstub, metadata=()) -> None:
    values = {
        "prefs:user7": ({"theme": "dark", "langs": ["py", "ts"]}, 3600),
        "prefs:user8": ({"theme": "light"}, 0),
        "notes:hostile": (HOSTILE, 0),
    }
    for key, (value, ttl) in values.items():
        mstub.Set(
            mpb.SetRequest(key=key, value_json=json.dumps(value), ttl_seconds=ttl),
            metadata=metadata,
            timeout=30,
        )


class UiProcess:
    """``ctxd ui`` in a subprocess, on a free loopback port."""

    def __init__(self, *args: str, env: dict | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        clean = {k: v for k, v in os.environ.items() if not k.startswith("CTXD_")}
        self.proc = subprocess.Popen(
            [CTXD, "ui", "--listen", f"127.0.0.1:{self.port}", *args],
            env={**clean, **(env or {})},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._wait()

    def _wait(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ctxd ui exited: {self.proc.stderr.read()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        raise TimeoutError("ctxd ui did not listen")

    def stop(self) -> str:
        self.proc.terminate()
        try:
            _, err = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return err
