"""The Python client (clients/python) against real sidecars over loopback:
installed alone into a fresh venv, every verb, retries across a restart,
errors with their google.rpc details, TLS, tokens and watch."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "clients" / "python"
if str(PACKAGE) not in sys.path:  # the suite's venv holds the server only: import from source
    sys.path.insert(0, str(PACKAGE))

import ctxd_client  # noqa: E402
from ctxd_client import Client  # noqa: E402
from tests.server.test_security import TOKEN, pki  # noqa: E402, F401 - fixture

SERVER_ONLY = {"boto3", "openai", "mcp", "lmdb", "ctxd", "ctxd-sidecar", "pydantic", "anthropic"}

SCRIPT = r"""
import json, sys
import ctxd_client
from ctxd_client import Client

with Client(sys.argv[1]) as c:
    r = c.append_turn("fresh-venv", [{"user": {"text": "hello"}}, {"assistant": {"text": "hi"}}])
    c.memory_set("fresh/greeting", {"text": "hello"})
    try:
        c.memory_get("fresh/missing")
    except ctxd_client.NotFound as exc:
        missing = exc.code.name
    print(json.dumps({
        "version": r.version,
        "slice": len(c.slice("fresh-venv")),
        "memory": json.loads(c.memory_get("fresh/greeting").value_json),
        "missing": missing,
        "module": ctxd_client.__file__,
    }))
"""


@pytest.fixture(scope="session")
def client_venv(tmp_path_factory) -> Path:
    """A venv holding only ctxd-client and its three dependencies (built once)."""
    base = tmp_path_factory.mktemp("client-venv")
    wheels = base / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(wheels), str(PACKAGE)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    (wheel,) = wheels.glob("ctxd_client-*.whl")
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    return py


def test_client_installs_alone_and_talks_to_a_sidecar(client_venv, spawn_sidecar, tmp_path):
    listed = subprocess.run(
        [str(client_venv), "-m", "pip", "list", "--format=json"],
        check=True, capture_output=True, text=True, timeout=60,
    ).stdout  # fmt: skip
    names = {p["name"].lower() for p in json.loads(listed)}
    assert {"ctxd-client", "grpcio", "protobuf", "grpcio-status"} <= names
    assert not names & SERVER_ONLY, names & SERVER_ONLY
    sc = spawn_sidecar("--store", "memory://")
    script = tmp_path / "use_client.py"
    script.write_text(SCRIPT)
    proc = subprocess.run(
        [str(client_venv), str(script), sc.address],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {**out, "version": 1, "slice": 2, "memory": {"text": "hello"}}
    assert out["missing"] == "NOT_FOUND"
    assert str(client_venv.parent.parent) in out["module"]


# -- every verb, in process ---------------------------------------------------------------
@pytest.fixture
def client(start_sidecar):
    sc = start_sidecar("memory://", contexts__max_turn_messages=64)
    with Client(sc.address) as c:
        yield c


def _turn(i: int) -> list[dict]:
    call = f"call-{i}"
    return [
        {"user": {"text": f"question {i}: what is {i} squared?"}},
        {
            "assistant": {
                "tool_calls": [{"id": call, "name": "sq", "arguments_json": f'{{"n":{i}}}'}]
            }
        },
        {"tool": {"call_id": call, "name": "sq", "json": f'{{"r":{i * i}}}'}},
        {"assistant": {"text": f"{i} squared is {i * i}."}},
    ]


def test_turns_slices_and_reads_follow_pages(client):
    for i in range(6):
        r = client.append_turn("conv", _turn(i), idempotency_key=f"t{i}", model="gpt-4o")
    assert r.version == 6 and len(r.message_ids) == 4
    again = client.append_turn("conv", _turn(5), idempotency_key="t5")
    assert again.replayed and again.version == 6
    whole = client.slice("conv", page_size=5)
    assert len(whole) == 24 and whole.version == 6
    assert whole[0].WhichOneof("kind") == "user"
    got = client.get("conv", page_size=7)
    assert len(got.context.messages) == 24 and got.info.version == 6
    assert client.info("conv").message_count == 24
    none = client.slice("conv", since_version=6)
    assert (none.change, none.messages) == ("none", [])
    client.append_turn("conv", [{"user": {"text": "more"}}], expected_version=6)
    delta = client.slice("conv", since_version=6)
    assert delta.change == "append" and [m.user.text for m in delta.messages] == ["more"]
    with pytest.raises(ctxd_client.Aborted):
        client.append_turn("conv", [{"user": {"text": "stale"}}], expected_version=1)
    assert ctxd_client.to_dict(whole[-1]) == {**ctxd_client.to_dict(whole[-1]), "id": "m24"}


def served(method: str, *codes: str) -> float:
    """Calls of ContextService ``method`` the in-process sidecars answered with
    one of ``codes`` (OK by default), from their metrics."""
    from ctxd_sidecar.server import metrics

    return sum(
        metrics.RPC_REQUESTS.labels("ctxd.v1.ContextService", method, code)._value.get()
        for code in codes or ("OK",)
    )


def test_a_whole_turn_is_one_call(client):
    client.append_turn("one", _turn(0))
    # A long reply, so that folding saves more than the summary takes.
    client.append_turn("one", [{"assistant": {"text": "worked it out. " + "lorem " * 80}}])
    held = client.slice("one")
    reads = served("GetContext")
    t = client.turn("one", _turn(1), since_version=held.version, idempotency_key="t1")
    assert served("GetContext") == reads  # the read rode on the AppendTurn
    assert isinstance(t, ctxd_client.Turn) and t.next.change == "append"
    assert [m.id for m in t.next.messages] == list(t.appended.message_ids)
    assert t.next.version == t.appended.version
    held.extend(t.next.messages)
    assert list(held) == list(client.slice("one"))
    # Reshaped (compacted): the whole slice, every page, replaces what was held.
    assert client.compact("one", keep_last=2).compacted
    t = client.turn("one", _turn(2), since_version=t.appended.version, page_size=2)
    assert t.next.change == "replace" and t.next.messages[0].id == "summary"
    assert list(t.next.messages) == list(client.slice("one"))
    # The same replacement read on its own, over several pages.
    again = client.slice("one", since_version=held.version, page_size=2)
    assert again.change == "replace" and list(again.messages) == list(client.slice("one"))
    as_openai = client.turn(
        "one", [{"role": "user", "content": "hi"}], since_version=t.next.version, format="openai"
    )
    assert as_openai.next.messages == [{"role": "user", "content": "hi"}]


def test_a_re_created_conversation_replaces_what_was_held(client):
    say = [{"user": {"text": "old"}}]
    client.append_turn("again", say)
    client.append_turn("again", say)
    held = client.slice("again")
    client.delete("again")
    for t in ("a", "b", "c"):
        client.append_turn("again", [{"user": {"text": t}}])
    # The version held carries its incarnation: no change to the caller's code.
    delta = client.slice("again", since_version=held.version)
    assert delta.change == "replace", delta.change
    assert [m.user.text for m in delta.messages] == ["a", "b", "c"]
    t = client.turn("again", [{"user": {"text": "d"}}], since_version=held.version)
    assert t.next.change == "replace" and len(t.next.messages) == 4
    t = client.turn("again", [{"user": {"text": "e"}}], since_version=t.next.version)
    assert t.next.change == "append" and [m.user.text for m in t.next.messages] == ["e"]
    # A plain int compares the version alone, unless its incarnation goes with it.
    v = int(held.version)
    assert client.slice("again", since_version=v).change == "append"
    r = client.slice("again", since_version=v, since_incarnation=held.version.incarnation)
    assert r.change == "replace"
    assert t.appended.incarnation == t.next.version.incarnation != held.version.incarnation


def _run_compacting(client, op, cid: str, after_calls: int):
    """Drive a client op by hand, compacting ``cid`` once ``after_calls``
    replies came back: the next page token is stale, and the op must start
    its read again."""
    calls, reply, error = 0, None, None
    try:
        call = next(op)
        while True:
            if calls == after_calls:
                client.compact(cid, keep_last=2)
            calls += 1
            try:
                reply, error = client._unary(call, 10), None
            except ctxd_client.CtxdError as exc:
                reply, error = None, exc
            call = op.send(reply) if error is None else op.throw(error)
    except StopIteration as stop:
        return stop.value, calls


def test_reads_start_again_when_a_compaction_lands_between_pages(client):
    for i in range(6):
        client.append_turn("re", _turn(i))
    op = Client.slice.__wrapped__(client, "re", page_size=5)  # the verb's op, driven here
    whole, calls = _run_compacting(client, op, "re", after_calls=2)
    assert list(whole) == list(client.slice("re")) and whole[0].id == "summary"
    assert calls > len(whole) // 5 + 1  # some pages were read twice
    # A turn's replaced slice, continued by GetContext, starts again the same way.
    for i in range(6, 12):
        client.append_turn("re", _turn(i))
    op = Client.turn.__wrapped__(client, "re", _turn(12), since_version=1, page_size=3)
    t, _ = _run_compacting(client, op, "re", after_calls=2)
    assert t.next.change == "replace"
    assert list(t.next.messages) == list(client.slice("re"))


def test_contexts_are_listed_by_page_and_deleted(client):
    for cid in ("a", "b", "c"):
        client.append_turn(cid, [{"user": {"text": cid}}])
    ids = [i.id for i in client.list_contexts(kind="conversation", page_size=1)]
    assert ids == ["a", "b", "c"]
    assert client.delete("b") is True
    assert [i.id for i in client.list_contexts(kind="conversation")] == ["a", "c"]
    with pytest.raises(ctxd_client.NotFound):
        client.get("b")


def test_compaction_by_runtime_and_by_sidecar_then_expanded(client):
    for i in range(8):
        client.append_turn("cmp", _turn(i))
    plan = client.plan_compaction("cmp", keep_last=4)
    assert not plan.nothing_to_do and plan.fold_count > 0
    applied = client.apply_compaction(
        "cmp", plan.plan_ref, {"goals": ["squares"], "decisions": [], "open": [], "facts": []}
    )
    assert applied.folded == plan.fold_count and applied.compaction.id
    expanded = client.expand_compaction("cmp", applied.compaction.id, page_size=3)
    assert len(expanded.messages) == applied.folded
    assert expanded.messages[0].user.text.startswith("question 0")
    for i in range(8, 14):
        client.append_turn("cmp", _turn(i))
    compacted = client.compact("cmp", keep_last=4)
    assert compacted.compacted and compacted.summariser
    sl = client.slice("cmp")
    assert sl[0].id == "summary"


def test_plan_runs_preflight_skills_prompt_and_usage(client):
    client.append_turn("p", [{"user": {"text": "plan it"}}])
    created = client.update_plan(
        "p", create={"goal": "ship", "items": [{"id": "a", "title": "build"}, {"title": "test"}]}
    )
    assert [i.title for i in created.plan.items] == ["build", "test"]
    bound = client.update_plan(
        "p", update={"item_id": "a", "bind": {"kind": "BINDING_KIND_RUN", "id": "r1"}}
    )
    assert bound.plan.items[0].bound.id == "r1"
    ran = client.report_run("p", kind="run", id="r1", outcome="succeeded")
    assert ran.item_id == "a"
    assert ran.plan.items[0].status == ctxd_client.context_pb2.PLAN_ITEM_STATUS_DONE
    assert client.update_plan("p", clear=True).version > ran.version
    with pytest.raises(ctxd_client.CtxdError):
        client.update_plan("p")
    v = client.set_preflight("p", {"ok": True})
    assert client.get("p").context.preflight_json == '{"ok": true}' and v > 0
    assert client.list_skills() == []
    with pytest.raises(ctxd_client.CtxdError):
        client.load_skill("p", "no-such-skill")
    assert client.unload_skill("p", "no-such-skill").unloaded is False
    prompt = client.render_prompt("p")
    assert prompt.prefix_hash and prompt.prefix_end <= len(prompt.prompt)
    usage = client.record_usage("p", input_tokens=500, output_tokens=20, model="gpt-4o")
    assert usage.est_tokens > 0 and usage.calibration > 0


def test_memory_verbs_follow_pages(client):
    for i in range(5):
        client.memory_set(f"pc/k{i}", {"i": i}, by="test")
    raw = client.memory_set("pc/raw", value_json='{"n":12345678901234567890123}')
    assert client.memory_get("pc/raw").value_json == '{"n":12345678901234567890123}'
    records = client.memory_list("pc/", include_values=True, limit=2)
    assert [r.key for r in records] == [f"pc/k{i}" for i in range(5)] + ["pc/raw"]
    assert json.loads(records[1].value_json) == {"i": 1}
    with pytest.raises(ctxd_client.Aborted):
        client.memory_set("pc/raw", 1, expected_version="stale")
    assert client.memory_delete("pc/raw", expected_version=raw.version) is True
    assert client.memory_delete("pc/raw") is False
    with pytest.raises(ctxd_client.NotFound):
        client.memory_get("pc/raw")


def test_watch_streams_events_until_closed(client):
    client.append_turn("w", [{"user": {"text": "first"}}])
    events = []
    with client.watch("w") as stream:

        def read():
            for event in stream:
                events.append(event)
                if len(events) == 2:
                    break

        t = threading.Thread(target=read)
        t.start()
        time.sleep(0.3)
        client.append_turn("w", [{"user": {"text": "second"}}])
        client.set_preflight("w", {"ok": 1})
        t.join(10)
    assert not t.is_alive()
    names = [ctxd_client.context_pb2.ContextEventKind.Name(e.kind) for e in events]
    assert names == ["CONTEXT_EVENT_KIND_TURN", "CONTEXT_EVENT_KIND_PREFLIGHT"]
    assert list(stream) == [], "a cancelled watch ends quietly"


HAS_FORMATS = "messages_json" in ctxd_client.context_pb2.AppendTurnRequest.DESCRIPTOR.fields_by_name
needs_formats = pytest.mark.skipif(not HAS_FORMATS, reason="this API has no provider formats")


@needs_formats
def test_openai_messages_pass_through(client):
    sent = [
        {"role": "user", "content": "what is 3 squared?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "sq", "arguments": '{"n": 3}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "9"},
        {"role": "assistant", "content": "9."},
    ]  # fmt: skip
    client.append_turn("oa", sent, format="openai")
    got = client.slice("oa", format="openai", page_size=2)
    assert [m["role"] for m in got] == ["user", "assistant", "tool", "assistant"]
    assert got[1]["tool_calls"][0]["function"]["arguments"] == '{"n": 3}'
    assert got.version == 1
    client.append_turn("oa", [{"role": "user", "content": "thanks"}], format="openai")
    delta = client.slice("oa", format="openai", since_version=1)
    assert delta.change == "append" and delta.messages == [{"role": "user", "content": "thanks"}]


@needs_formats
def test_anthropic_pages_are_joined_and_system_kept(client):
    turn = [
        {"role": "user", "content": "look it up"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "find",
                                            "input": {"q": "x"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x!"},
                                     {"type": "text", "text": "and?"}]},
    ]  # fmt: skip
    client.append_turn("an", turn, format="anthropic", system="be brief")
    whole = client.slice("an", format="anthropic")
    paged = client.slice("an", format="anthropic", page_size=1)
    assert list(paged) == list(whole) and paged.system == whole.system
    assert [m["role"] for m in whole] == ["user", "assistant", "user"]
    assert any(b.get("text") == "be brief" for b in whole.system)
    with pytest.raises(ctxd_client.CtxdError, match="Anthropic"):
        client.append_turn("an", turn, format="openai", system="nope")
    with pytest.raises(ctxd_client.InvalidArgument) as bad:
        client.append_turn(
            "an", [{"role": "user", "content": [{"type": "image"}]}], format="anthropic"
        )
    assert bad.value.field_violations[0].field.startswith("messages_json[0]")


# -- errors ------------------------------------------------------------------------------
def test_errors_are_typed_and_carry_their_details(start_sidecar):
    sc = start_sidecar("memory://", memory__max_value_bytes=64)
    with Client(sc.address) as c:
        with pytest.raises(ctxd_client.InvalidArgument) as bad:
            call = {"id": "x", "name": "f", "arguments_json": "{"}
            c.append_turn("e", [{"assistant": {"tool_calls": [call]}}])
        assert (
            bad.value.field_violations and "arguments_json" in bad.value.field_violations[0].field
        )
        assert isinstance(bad.value, ctxd_client.CtxdError)
        with pytest.raises(ctxd_client.ResourceExhausted) as big:
            c.memory_set("e/big", "x" * 200)
        assert big.value.quota_violations
        with pytest.raises(ctxd_client.FailedPrecondition):
            c.delete("root")
        if not HAS_FORMATS:
            with pytest.raises(ctxd_client.CtxdError, match="provider formats"):
                c.slice("e", format="openai")
        c.append_turn("e", [{"user": {"text": "quiet"}}])
        with pytest.raises(ctxd_client.DeadlineExceeded):
            list(c.watch("e", timeout=0.5))


def test_token_and_tls(start_sidecar, pki, tmp_path):  # noqa: F811
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    sc = start_sidecar(
        "memory://",
        auth_token_file=str(token_file),
        tls_cert_file=str(pki["srv"]),
        tls_key_file=str(pki["srv_key"]),
        tls_client_ca_file=str(pki["ca"]),
    )
    port = sc.address.rsplit(":", 1)[1]
    tls = {"root_ca": pki["ca"], "client_cert": pki["cli"], "client_key": pki["cli_key"]}
    with Client(f"localhost:{port}", token="wrong", **tls) as c:
        with pytest.raises(ctxd_client.Unauthenticated):
            c.memory_list()
    with Client(f"localhost:{port}", token=TOKEN, **tls) as c:
        assert c.memory_list() == []


# -- retries across a restart ---------------------------------------------------------------
def test_append_turn_is_retried_across_a_sidecar_restart(spawn_sidecar, tmp_path):
    sp = spawn_sidecar("--store", f"lmdb://{tmp_path / 'db'}")
    retry = ctxd_client.Retry(attempts=12, max_backoff=2.0)  # a restart takes seconds here
    with Client(sp.address, timeout=5, retry=retry) as c:
        assert c.append_turn("r", [{"user": {"text": "before"}}]).version == 1
        sp.kill()
        restarter = threading.Timer(0.5, sp.start)
        restarter.start()
        r = c.append_turn("r", [{"user": {"text": "during"}}])
        restarter.join()
        assert r.version == 2 and not r.replayed
        assert [m.user.text for m in c.slice("r")] == ["before", "during"]
        sp.kill()
        with pytest.raises(ctxd_client.Unavailable):
            c.memory_set("r/x", 1)  # not retried: no idempotency key protects it


# -- the asyncio client ----------------------------------------------------------------------
async def test_async_client_verbs_and_watch(start_sidecar):
    sc = start_sidecar("memory://")
    async with ctxd_client.AsyncClient(sc.address) as c:
        first = await c.append_turn("aio", [{"user": {"text": "one"}}])
        events = c.watch("aio")
        nxt = events.__anext__()
        task = __import__("asyncio").ensure_future(nxt)
        await __import__("asyncio").sleep(0.3)
        await c.append_turn("aio", [{"user": {"text": "two"}}])
        event = await __import__("asyncio").wait_for(task, 10)
        await events.aclose()
        assert event.version == first.version + 1
        assert [m.user.text for m in await c.slice("aio")] == ["one", "two"]
        delta = await c.slice("aio", since_version=first.version)
        assert delta.change == "append"
        await c.memory_set("aio/k", [1, 2])
        assert [r.key for r in await c.memory_list("aio/")] == ["aio/k"]
        with pytest.raises(ctxd_client.NotFound):
            await c.memory_get("aio/none")
        assert (await c.info("aio")).version == 2
        t = await c.turn("aio", [{"user": {"text": "three"}}], since_version=2)
        assert t.next.change == "append" and [m.user.text for m in t.next.messages] == ["three"]


def test_reads_at_a_version_list_versions_and_fork(client):
    for i in range(3):
        client.append_turn("hist", [{"user": {"text": f"t{i}"}}])
    assert [m.user.text for m in client.slice("hist", at_version=2)] == ["t0", "t1"]
    assert client.get("hist", at_version=1).info.version == 1
    assert [m.user.text for m in client.get("hist", at_version=1).context.messages] == ["t0"]
    assert [v.version for v in client.versions("hist", page_size=2)] == [3, 2, 1]
    info = client.fork("hist", "hist-fork", at_version=2, idempotency_key="f")
    assert (info.forked_from, info.forked_at_version) == ("hist", 2)
    assert client.fork("hist", "hist-fork", at_version=2, idempotency_key="f") == info
    client.append_turn("hist-fork", [{"user": {"text": "other"}}])
    assert [m.user.text for m in client.slice("hist-fork")] == ["t0", "t1", "other"]
    assert [m.user.text for m in client.slice("hist")] == ["t0", "t1", "t2"]


def test_a_turn_passes_the_providers_usage_through(client):
    """A runtime's loop against an OpenAI-compatible server on loopback: the
    reply's usage (an SDK object, half of each prompt cached) rides on the
    next turn and moves the conversation's cache figures; an Anthropic usage
    dict counts its cache reads and writes into the input."""
    import openai

    from tests.support.fake_openai import FakeOpenAI

    with FakeOpenAI("plain") as server:
        server.cached_share = 0.5
        llm = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        t = client.turn("loop", [{"user": {"text": "hello " * 200}}], since_version=0)
        held, prompts, cached = t.next, 0, 0
        for _ in range(3):
            msgs = list(client.slice("loop", format="openai"))
            reply = llm.chat.completions.create(model="gpt-4o", messages=msgs)
            usage = reply.usage
            prompts += usage.prompt_tokens
            cached += usage.prompt_tokens_details.cached_tokens
            answer = [{"assistant": {"text": reply.choices[0].message.content}}]
            t = client.turn(
                "loop",
                [*answer, {"user": {"text": "more " * 50}}],
                since_version=held.version,
                usage=usage,
                model="gpt-4o",
            )
            held = t.next
    u = client.get("loop").context.cache_usage
    assert (u.reports, u.input_tokens, u.cached_input_tokens) == (3, prompts, cached)
    assert cached > 0 and u.cache_read_share == pytest.approx(cached / prompts)
    anthropic = {
        "input_tokens": 20,
        "output_tokens": 7,
        "cache_read_input_tokens": 900,
        "cache_creation_input_tokens": 80,
    }
    r = client.record_usage("loop", usage=anthropic)
    assert r.cache_usage.input_tokens == prompts + 1000
    assert r.cache_usage.cached_input_tokens == cached + 900
    assert r.cache_usage.cache_write_tokens == 80
    with pytest.raises(ctxd_client.InvalidArgument):
        client.record_usage("loop", input_tokens=10, cached_input_tokens=11)
