"""The admin verbs, run as the real ``ctxd`` console script against real sidecars."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as cpb
from tests.conftest import free_port
from tests.server import test_security

CTXD = str(Path(sys.executable).with_name("ctxd"))
TOKEN = "s3cret-admin-token"


def ctxd(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CTXD_")}
    return subprocess.run(
        [CTXD, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**clean, **(env or {})},
    )


def one_line_error(proc: subprocess.CompletedProcess, code: int = 1) -> str:
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ctxd: "), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


@pytest.fixture
def token_file(tmp_path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return path


@pytest.fixture
def served(spawn_sidecar, tmp_path):
    """A ``ctxd serve`` subprocess on its own LMDB store, without auth."""
    return spawn_sidecar("--store", f"lmdb://{tmp_path / 'a'}?map_size=64MiB").running()


def _fill(sc) -> None:
    """A compacted conversation with tool rounds, a plan and a preflight verdict."""
    for t in range(12):
        sc.contexts.AppendTurn(
            cpb.AppendTurnRequest(
                context_id="conv-1",
                principal="alice",
                model="gpt-4o",
                task="task-7",
                messages=[
                    cpb.Message(user=cpb.UserMessage(text=f"question {t}", principal="alice")),
                    cpb.Message(
                        assistant=cpb.AssistantMessage(
                            tool_calls=[
                                cpb.ToolCall(id=f"c{t}", name="search", arguments_json='{"q":1}')
                            ]
                        )
                    ),
                    cpb.Message(tool=cpb.ToolResult(call_id=f"c{t}", name="search", json="[1,2]")),
                    cpb.Message(assistant=cpb.AssistantMessage(text=f"answer {t} — ключ")),
                ],
            ),
            timeout=10,
        )
    assert sc.contexts.Compact(cpb.CompactRequest(context_id="conv-1", keep_last=9)).compacted
    sc.contexts.UpdatePlan(
        cpb.UpdatePlanRequest(
            context_id="conv-1",
            create=cpb.PlanCreate(
                goal="ship",
                items=[
                    cpb.PlanItemSpec(id="a", title="first"),
                    cpb.PlanItemSpec(id="b", title="second", detail="more"),
                    cpb.PlanItemSpec(id="c", title="third"),
                ],
            ),
        )
    )
    for item_id, status, bind in (
        ("a", cpb.PLAN_ITEM_STATUS_DONE, "run-1"),
        ("b", cpb.PLAN_ITEM_STATUS_BLOCKED, "run-1"),
    ):
        sc.contexts.UpdatePlan(
            cpb.UpdatePlanRequest(
                context_id="conv-1",
                update=cpb.PlanUpdate(
                    item_id=item_id,
                    status=status,
                    note=f"note {item_id}",
                    bind=cpb.PlanBinding(kind=cpb.BINDING_KIND_RUN, id=bind),
                ),
            )
        )
    sc.contexts.SetPreflight(
        cpb.SetPreflightRequest(context_id="conv-1", verdict_json='{"ok": true}')
    )
    sc.contexts.AppendTurn(
        cpb.AppendTurnRequest(
            context_id="conv-2", messages=[cpb.Message(note=cpb.NoteMessage(text="hello"))]
        )
    )


def _split(text: str) -> tuple[list[dict], list[str]]:
    headers, messages = [], []
    for line in text.splitlines():
        obj = json.loads(line)
        if "ctxd_export" in obj:
            headers.append(obj)
        else:
            messages.append(line)
    return headers, messages


def _comparable(header: dict) -> dict:
    out = {k: v for k, v in header.items() if k != "version"}
    for part in ("summary", "plan"):
        if out.get(part):
            out[part] = {k: v for k, v in out[part].items() if k != "updated_ms"}
    return out


def test_health_is_one_line_and_its_exit_code_says_serving(served):
    ok = ctxd("health", "--address", served.address)
    assert ok.returncode == 0 and ok.stdout.strip() == f"SERVING {served.address}"
    js = ctxd("health", "--json", env={"CTXD_ADDRESS": served.address})
    assert json.loads(js.stdout)["status"] == "SERVING"
    down = ctxd("health", "--address", f"127.0.0.1:{free_port()}", "--timeout", "2")
    assert down.returncode == 1
    assert len(down.stdout.strip().splitlines()) == 1
    assert down.stdout.startswith("UNREACHABLE") and "UNAVAILABLE" in down.stdout
    bogus = ctxd("health", "--service", "bogus", "--address", served.address)
    assert bogus.returncode == 1 and len(bogus.stdout.strip().splitlines()) == 1
    assert bogus.stdout.startswith(f"SERVICE_UNKNOWN {served.address}")
    assert "'bogus'" in bogus.stdout and "ctxd.v1.ContextService" in bogus.stdout
    known = ctxd("health", "--service", "ctxd.v1.MemoryService", "--address", served.address)
    assert known.returncode == 0 and known.stdout.startswith("SERVING")


def test_export_import_round_trips_a_compacted_context(served, spawn_sidecar, tmp_path):
    _fill(served)
    first = ctxd("contexts", "export", "conv-1", "conv-2", "--address", served.address)
    assert first.returncode == 0, first.stderr
    headers, lines = _split(first.stdout)
    assert [h["id"] for h in headers] == ["conv-1", "conv-2"]
    assert headers[0]["folded"] > 0 and headers[0]["summary"]["covers_messages"]
    assert headers[0]["plan"]["goal"] == "ship" and headers[0]["preflight"] == '{"ok": true}'
    assert json.loads(lines[0])["id"] == f"m{headers[0]['folded'] + 1}"

    dump = tmp_path / "export.jsonl"
    dump.write_text(first.stdout)
    other = spawn_sidecar("--store", f"lmdb://{tmp_path / 'b'}?map_size=64MiB")
    imported = ctxd("contexts", "import", str(dump), "--json", "--address", other.address)
    assert imported.returncode == 0, imported.stderr
    assert [json.loads(x)["id"] for x in imported.stdout.splitlines()] == ["conv-1", "conv-2"]

    again = ctxd("contexts", "export", "conv-1", "conv-2", "--address", other.address)
    headers2, lines2 = _split(again.stdout)
    assert lines2 == lines  # ids, timestamps, contents: identical
    assert [_comparable(h) for h in headers2] == [_comparable(h) for h in headers]

    # Importing the same file again creates nothing: both are there already.
    again = ctxd("contexts", "import", str(dump), "--address", other.address)
    assert again.returncode == 0 and again.stdout == "", again.stderr
    assert again.stderr.count("imported from this file before") == 2
    # Importing over a different conversation is refused in one line.
    other.running().contexts.AppendTurn(
        cpb.AppendTurnRequest(
            context_id="conv-1", messages=[cpb.Message(user=cpb.UserMessage(text="more"))]
        ),
        timeout=10,
    )
    refused = ctxd("contexts", "import", str(dump), "--address", other.address)
    assert "FAILED_PRECONDITION" in one_line_error(refused)


def test_an_empty_context_exports_and_imports(served, spawn_sidecar, tmp_path):
    """CreateContext makes a context with no messages: it round-trips too."""
    served.contexts.CreateContext(
        cpb.CreateContextRequest(context_id="empty-1", task="triage", model_window=64000),
        timeout=10,
    )
    first = ctxd("contexts", "export", "empty-1", "--address", served.address)
    assert first.returncode == 0, first.stderr
    headers, lines = _split(first.stdout)
    assert [h["id"] for h in headers] == ["empty-1"] and lines == []

    dump = tmp_path / "empty.jsonl"
    dump.write_text(first.stdout)
    other = spawn_sidecar("--store", f"lmdb://{tmp_path / 'b'}?map_size=64MiB")
    imported = ctxd("contexts", "import", str(dump), "--json", "--address", other.address)
    assert imported.returncode == 0 and imported.stderr == "", imported.stderr
    assert [json.loads(x)["id"] for x in imported.stdout.splitlines()] == ["empty-1"]
    again = ctxd("contexts", "export", "empty-1", "--address", other.address)
    assert again.returncode == 0, again.stderr
    headers2, lines2 = _split(again.stdout)
    assert lines2 == [] and [_comparable(h) for h in headers2] == [_comparable(h) for h in headers]


def test_a_context_compacted_next_to_a_tool_round_imports_whole(served, spawn_sidecar, tmp_path):
    """The kept side starts with a call and its result: the import folds its
    placeholders at the same place. An import that fails leaves nothing."""
    stub = served.contexts

    def turn(*messages: cpb.Message) -> None:
        stub.AppendTurn(cpb.AppendTurnRequest(context_id="round", messages=list(messages)))

    call = cpb.ToolCall(id="X1", name="read", arguments_json='{"p": "/opt/a.txt"}')
    turn(cpb.Message(user=cpb.UserMessage(text="start with /opt/a.txt")))
    turn(cpb.Message(assistant=cpb.AssistantMessage(tool_calls=[call])))
    turn(cpb.Message(tool=cpb.ToolResult(call_id="X1", name="read", text="A content")))
    turn(cpb.Message(assistant=cpb.AssistantMessage(text="done")))
    plan = stub.PlanCompaction(cpb.PlanCompactionRequest(context_id="round", keep_last=2))
    assert plan.fold_count > 0
    stub.ApplyCompaction(
        cpb.ApplyCompactionRequest(context_id="round", plan_ref=plan.plan_ref, answer="read a.txt")
    )
    exported = ctxd("contexts", "export", "round", "--address", served.address)
    assert exported.returncode == 0, exported.stderr
    dump = tmp_path / "round.jsonl"
    dump.write_text(exported.stdout)

    other = spawn_sidecar("--store", f"lmdb://{tmp_path / 'b'}?map_size=64MiB")
    imported = ctxd("contexts", "import", str(dump), "--address", other.address)
    assert imported.returncode == 0, imported.stderr
    again = ctxd("contexts", "export", "round", "--address", other.address)
    assert _split(again.stdout)[1] == _split(exported.stdout)[1]
    assert [_comparable(h) for h in _split(again.stdout)[0]] == [
        _comparable(h) for h in _split(exported.stdout)[0]
    ]

    # A failed import (here: a summary whose placeholders cannot be folded,
    # as every message left is an open call) leaves no half-built context.
    header, first = exported.stdout.splitlines()[:2]
    broken = tmp_path / "broken.jsonl"
    head = {**json.loads(header), "id": "broken", "messages": 1}
    body = {**json.loads(first), "id": f"m{head['folded'] + 1}"}
    body.pop("tool", None)
    body["assistant"] = {"toolCalls": [{"id": "Y1", "name": "wait", "argumentsJson": "{}"}]}
    broken.write_text(json.dumps(head) + "\n" + json.dumps(body) + "\n")
    failed = ctxd("contexts", "import", str(broken), "--address", other.address)
    assert failed.returncode != 0
    info = cpb.GetContextRequest(context_id="broken", view=cpb.CONTEXT_VIEW_INFO)
    with pytest.raises(grpc.RpcError) as err:
        other.running().contexts.GetContext(info)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_import_rejects_a_truncated_file_as_a_usage_error(served, tmp_path):
    _fill(served)
    text = ctxd("contexts", "export", "conv-1", "--address", served.address).stdout
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(text.splitlines()[:-1]) + "\n")
    bad = ctxd("contexts", "import", str(cut), "--address", served.address)
    assert "truncated" in one_line_error(bad, 2)


def test_contexts_list_show_compact_delete(served):
    _fill(served)
    table = ctxd("contexts", "list", "--address", served.address)
    assert table.returncode == 0
    assert table.stdout.splitlines()[0].split()[:3] == ["ID", "KIND", "VERSION"]
    rows = [
        json.loads(x)
        for x in ctxd("contexts", "list", "--json", "--address", served.address).stdout.splitlines()
    ]
    assert {r["id"] for r in rows} == {"root", "conv-1", "conv-2"}

    show = ctxd("contexts", "show", "conv-1", "--tail", "3", "--address", served.address)
    assert show.returncode == 0 and "plan: ship" in show.stdout and "last 3 of" in show.stdout
    full = json.loads(
        ctxd("contexts", "show", "conv-1", "--json", "--address", served.address).stdout
    )
    assert full["id"] == "conv-1" and len(full["messages"]) >= 9
    tail = json.loads(
        ctxd(
            "contexts", "show", "conv-1", "--json", "--tail", "2", "--address", served.address
        ).stdout
    )
    assert [m["id"] for m in tail["messages"]] == [m["id"] for m in full["messages"][-2:]]
    assert tail["version"] == full["version"]
    none = ctxd("contexts", "show", "conv-1", "--json", "--tail", "0", "--address", served.address)
    assert json.loads(none.stdout).get("messages", []) == []

    compacted = ctxd(
        "contexts", "compact", "conv-1", "--keep-last", "2", "--json", "--address", served.address
    )
    assert compacted.returncode == 0 and json.loads(compacted.stdout)["compacted"] is True
    record = json.loads(compacted.stdout)["compaction"]
    listed = ctxd("contexts", "compactions", "conv-1", "--address", served.address)
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split()[:5] == ["ID", "MESSAGES", "FOLDED", "TOKENS", "FIDELITY"]
    f = record["fidelity"]
    (row,) = [r for r in rows if r.split()[0] == record["id"]]  # oldest first
    assert f"{f['carried']}/{f['artifacts']} ({f['score']:.1%})" in row
    as_json = ctxd("contexts", "compactions", "conv-1", "--json", "--address", served.address)
    assert json.loads(as_json.stdout.splitlines()[-1])["fidelity"] == f
    # The provider's cache, reported after the compaction: the conversation's
    # share, and the compaction's reported cache writes against its prediction.
    predicted = int(record.get("cache_cost", {}).get("predicted_write_tokens", 0))
    usage = cpb.RecordUsageRequest(
        context_id="conv-1", input_tokens=800, cached_input_tokens=200, cache_write_tokens=500
    )
    served.contexts.RecordUsage(usage, timeout=10)
    shown = ctxd("contexts", "show", "conv-1", "--address", served.address).stdout
    assert "25.0% read (200 of 800 input tokens, 500 written, 1 reports)" in shown
    listed = ctxd("contexts", "compactions", "conv-1", "--address", served.address).stdout
    assert "CACHE WRITES" in listed.splitlines()[0]
    assert f"500 of {predicted} pred." in listed

    gone = ctxd("contexts", "delete", "conv-2", "--address", served.address)
    assert gone.returncode == 0 and gone.stdout.strip() == "deleted conv-2"
    missing = ctxd("contexts", "show", "conv-2", "--address", served.address)
    assert one_line_error(missing).startswith("ctxd: NOT_FOUND: ")
    root = ctxd("contexts", "delete", "root", "--address", served.address)
    assert "FAILED_PRECONDITION" in one_line_error(root)


def test_memory_verbs(served):
    addr = ("--address", served.address)
    s = ctxd("memory", "set", "prefs/lang", '{"lang": "fr"}', "--ttl", "3600", "--json", *addr)
    assert s.returncode == 0, s.stderr
    assert json.loads(s.stdout)["expires_at_ms"] != "0"
    ctxd("memory", "set", "other", "1", *addr)
    assert ctxd("memory", "get", "prefs/lang", *addr).stdout.strip() == '{"lang": "fr"}'
    listed = ctxd("memory", "list", "prefs/", "--json", *addr).stdout.splitlines()
    assert [json.loads(x)["key"] for x in listed] == ["prefs/lang"]
    table = ctxd("memory", "list", "--values", *addr).stdout.splitlines()
    assert table[0].split() == ["KEY", "VERSION", "UPDATED", "EXPIRES", "BY", "VALUE"]
    assert len(table) == 3
    assert ctxd("memory", "delete", "prefs/lang", *addr).stdout.strip() == "deleted prefs/lang"
    assert one_line_error(ctxd("memory", "get", "prefs/lang", *addr)).startswith("ctxd: NOT_FOUND")
    assert "not JSON" in one_line_error(ctxd("memory", "set", "k", "not json", *addr), 2)
    bad_key = ctxd("memory", "set", "_reserved", "1", *addr)
    assert one_line_error(bad_key).startswith("ctxd: INVALID_ARGUMENT")


def test_usage_errors_exit_2():
    assert ctxd("memory", "set", "only-key").returncode == 2
    assert ctxd("contexts").returncode == 2
    assert ctxd("contexts", "export").returncode == 2


def test_bearer_token_from_flag_file_and_environment(spawn_sidecar, tmp_path, token_file):
    sc = spawn_sidecar(
        "--store",
        f"lmdb://{tmp_path / 'a'}?map_size=64MiB",
        "--set",
        f"auth_token_file={token_file}",
    )
    addr = ("--address", sc.address)
    # Health needs no token (probes run before auth is set up).
    assert ctxd("health", *addr).returncode == 0
    assert ctxd("memory", "set", "k", "1", "--token-file", str(token_file), *addr).returncode == 0
    assert ctxd("memory", "get", "k", "--token", TOKEN, *addr).stdout.strip() == "1"
    env = {"CTXD_ADDRESS": sc.address, "CTXD_TOKEN_FILE": str(token_file)}
    assert ctxd("contexts", "list", env=env).returncode == 0
    # The server's own variable works too (kubectl exec into the ctxd container).
    env = {"CTXD_ADDRESS": sc.address, "CTXD_AUTH_TOKEN_FILE": str(token_file)}
    assert ctxd("memory", "list", env=env).returncode == 0

    wrong = ctxd("memory", "get", "k", "--token", "not-the-token", *addr)
    assert one_line_error(wrong) == "ctxd: UNAUTHENTICATED: missing or invalid bearer token"
    none = ctxd("contexts", "list", *addr)
    assert one_line_error(none).startswith("ctxd: UNAUTHENTICATED")
    missing = ctxd("contexts", "list", "--token-file", str(tmp_path / "nope"), *addr)
    assert "cannot read token file" in one_line_error(missing, 2)


def _turn(sc, cid: str) -> None:
    sc.contexts.AppendTurn(
        cpb.AppendTurnRequest(
            context_id=cid, messages=[cpb.Message(note=cpb.NoteMessage(text="x"))]
        ),
        timeout=10,
    )


_SIGINT_DEFAULT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


@pytest.mark.timeout(90)
def test_watch_prints_events_until_interrupted(served):
    _turn(served, "conv-w")
    proc = subprocess.Popen(
        # A suite started in the background inherits SIGINT ignored; the
        # watcher is run as a terminal would run it (SIGINT at its default,
        # set before exec: a preexec_fn would fork this threaded process).
        [sys.executable, "-c", _SIGINT_DEFAULT, CTXD, "watch", "conv-w", "--json"]
        + ["--address", served.address],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    try:
        deadline = time.monotonic() + 40
        event = None
        while event is None and time.monotonic() < deadline:
            _turn(served, "conv-w")  # until the watcher, which starts in its own time, sees one
            try:
                event = json.loads(lines.get(timeout=1))
            except queue.Empty:
                assert proc.poll() is None, proc.stderr.read()
        assert event is not None
        assert event["kind"] == "CONTEXT_EVENT_KIND_TURN" and event["context_id"] == "conv-w"
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(15)
    assert code == 0
    assert "Traceback" not in proc.stderr.read()


def test_watch_of_an_unknown_context_is_one_line(served):
    assert one_line_error(ctxd("watch", "nope", "--address", served.address)).startswith(
        "ctxd: NOT_FOUND"
    )


def test_health_dials_the_servers_listen_address_as_the_image_healthcheck_does(served):
    port = served.address.rsplit(":", 1)[1]
    ok = ctxd("health", env={"CTXD_LISTEN": f"0.0.0.0:{port}"})
    assert ok.returncode == 0 and ok.stdout.strip() == f"SERVING 127.0.0.1:{port}"


@pytest.fixture
def pki(tmp_path):
    """CA, server and client certificates (test_security's)."""
    return test_security.pki.__wrapped__(tmp_path)


def test_mutual_tls_with_a_token(start_sidecar, pki, token_file):
    sc = start_sidecar(
        "memory://",
        tls_cert_file=str(pki["srv"]),
        tls_key_file=str(pki["srv_key"]),
        tls_client_ca_file=str(pki["ca"]),
        auth_token_file=str(token_file),
    )
    env = {
        "CTXD_ADDRESS": sc.address,
        "CTXD_TOKEN_FILE": str(token_file),
        "CTXD_TLS_CA_FILE": str(pki["ca"]),
        "CTXD_TLS_SERVER_NAME": "localhost",
    }
    flags = ("--tls-cert-file", str(pki["cli"]), "--tls-key-file", str(pki["cli_key"]))
    assert ctxd("memory", "set", "k", '"v"', *flags, env=env).returncode == 0
    client_env = {
        **env,
        "CTXD_TLS_CLIENT_CERT_FILE": str(pki["cli"]),
        "CTXD_TLS_CLIENT_KEY_FILE": str(pki["cli_key"]),
    }
    assert ctxd("memory", "get", "k", env=client_env).stdout.strip() == '"v"'
    # No client certificate: the handshake fails, in one line.
    refused = ctxd("memory", "get", "k", "--timeout", "5", env=env)
    assert one_line_error(refused).startswith("ctxd: UNAVAILABLE")
    half = ctxd("memory", "get", "k", "--tls-cert-file", str(pki["cli"]), env=env)
    assert "together" in one_line_error(half, 2)


def test_export_reads_every_page(served, spawn_sidecar, tmp_path):
    """More messages than one GetContext page (1000) still round-trip."""
    for t in range(6):
        served.contexts.AppendTurn(
            cpb.AppendTurnRequest(
                context_id="long",
                messages=[
                    cpb.Message(note=cpb.NoteMessage(text=f"note {t}.{n}")) for n in range(200)
                ],
            ),
            timeout=30,
        )
    first = ctxd("contexts", "export", "long", "--address", served.address)
    headers, lines = _split(first.stdout)
    assert headers[0]["messages"] == 1200 and len(lines) == 1200
    assert json.loads(lines[-1])["id"] == "m1200"
    dump = tmp_path / "long.jsonl"
    dump.write_text(first.stdout)
    other = spawn_sidecar("--store", "memory://")
    assert ctxd("contexts", "import", str(dump), "--address", other.address).returncode == 0
    again = ctxd("contexts", "export", "long", "--address", other.address)
    assert _split(again.stdout)[1] == lines
