"""The API the framework integrations stand on, over real gRPC: native
payloads, the Responses item format, tail reads, truncation, listing by id
prefix and empty contexts, each with its bad input."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python"))

from ctxd_client import Client  # noqa: E402
from ctxd_client._api.ctxd.v1 import context_pb2 as pb  # noqa: E402
from ctxd_client.errors import Aborted, FailedPrecondition, InvalidArgument, NotFound  # noqa: E402
from tests.support.responses_corpus import corpus  # noqa: E402

RESPONSES = "openai_responses"


@pytest.fixture
def lmdb_uri(tmp_path) -> str:
    return f"lmdb://{tmp_path / 'store'}?map_size=256MiB"


def _client(sc) -> Client:
    return Client(sc.address)


def _field(exc: pytest.ExceptionInfo) -> str:
    return exc.value.field_violations[0].field


def _items(c: Client, cid: str, **kw) -> list[dict]:
    return list(c.slice(cid, format=RESPONSES, **kw))


# -- Responses items and native payloads -------------------------------------------------------
def test_every_responses_item_comes_back_exactly_through_checkpoints_and_restart(
    start_sidecar, lmdb_uri
):
    items = corpus()
    sc = start_sidecar(lmdb_uri, contexts__checkpoint_every=1, contexts__auto_compact=False)
    with _client(sc) as c:
        for i in range(0, len(items), 5):  # several turns: several sealed segments
            c.append_turn("sess-1", items[i : i + 5], format=RESPONSES)
        assert _items(c, "sess-1") == items
        raw = c.slice("sess-1", format="ctxd")
        assert all(m.HasField("native") for m in raw)
        assert [json.loads(m.native.data) for m in raw] == items
    sc.stop()
    again = start_sidecar(lmdb_uri)
    with _client(again) as c:
        assert _items(c, "sess-1") == items
        # Numbers inside JSON text stay as written.
        assert any("1.10" in json.dumps(i) for i in _items(c, "sess-1"))


def test_native_bytes_survive_compaction_expand_and_every_view(start_sidecar, lmdb_uri):
    sc = start_sidecar(lmdb_uri, contexts__checkpoint_every=2, contexts__auto_compact=False)
    blobs = [bytes(range(256)) + bytes([i]) for i in range(8)]  # not UTF-8
    with _client(sc) as c:
        for i, blob in enumerate(blobs):
            m = pb.Message(user=pb.UserMessage(text=f"turn {i} " + "words " * 40))
            m.native.format = "test.bin"
            m.native.data = blob
            c.append_turn("nat", [m])
        full = c.get("nat").context.messages
        assert [m.native.data for m in full] == blobs
        done = c.compact("nat", keep_last=3)
        assert done.compacted, done.reason
        kept = c.get("nat").context.messages
        assert [m.native.data for m in kept] == blobs[-3:]
        folded = c.expand_compaction("nat", done.compaction.id).messages
        assert [m.native.data for m in folded] == blobs[: len(folded)]
        assert len(folded) == len(blobs) - 3
    sc.stop()
    with _client(start_sidecar(lmdb_uri)) as c:
        folded = c.expand_compaction("nat", done.compaction.id).messages
        assert [m.native.data for m in folded] == blobs[:5]
        assert [m.native.data for m in c.get("nat").context.messages] == blobs[-3:]


def test_compacted_responses_session_reads_summary_then_kept_items(start_sidecar):
    sc = start_sidecar("memory://", contexts__auto_compact=False)
    # A long exchange before the corpus: a compaction that would not make the
    # context smaller is declined, so the folded span must outweigh a summary.
    history = [
        {"type": "message", "role": role, "content": f"{role} turn {i}: " + "details " * 80}
        for i, role in enumerate(["user", "assistant"] * 5)
    ]
    items = history + corpus()
    with _client(sc) as c:
        c.append_turn("s", items, format=RESPONSES)
        done = c.compact("s", keep_last=4)
        assert done.compacted, done.reason
        out = _items(c, "s")
        summary = c.get("s").context.summary
        assert out[0]["role"] == "system" and summary.covers_messages == done.folded
        assert out[1:] == items[-len(out) + 1 :]
        folded = c.expand_compaction("s", done.compaction.id).messages
        assert [json.loads(m.native.data) for m in folded] == items[: len(folded)]


def test_responses_items_are_projected_for_other_formats(start_sidecar):
    sc = start_sidecar("memory://", contexts__auto_compact=False)
    with _client(sc) as c:
        c.append_turn("p", corpus()[:10], format=RESPONSES)
        chat = list(c.slice("p", format="openai"))
        roles = [m["role"] for m in chat]
        assert roles[:4] == ["system", "system", "user", "user"]
        calls = [m for m in chat if m.get("tool_calls")]
        assert calls[0]["tool_calls"][0]["function"]["name"] == "get_weather"
        assert any(m["role"] == "tool" and m["tool_call_id"] == "call_weather_1" for m in chat)
        assert any("[reasoning] The user wants" in str(m["content"]) for m in chat)
        assert "[image]" in chat[3]["content"]


def test_messages_added_in_other_formats_come_out_as_responses_items(start_sidecar):
    sc = start_sidecar("memory://", contexts__auto_compact=False)
    with _client(sc) as c:
        c.append_turn(
            "o",
            [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": ""}}
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "done"},
            ],
            format="openai",
        )
        assert _items(c, "o") == [
            {"role": "user", "content": "hi"},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "done"},
        ]


@pytest.mark.parametrize(
    ("items", "field"),
    [
        (["not an object"], "messages_json[0]"),
        ([{"role": "wizard", "content": "x"}], "messages_json[0].role"),
        ([{"type": 7}], "messages_json[0].type"),
        ([{"type": "function_call", "name": "f", "arguments": "{}"}], "messages_json[0].call_id"),
        (
            [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{not json"}],
            "messages_json[0]",
        ),
        (
            [{"type": "function_call_output", "call_id": "nobody", "output": "x"}],
            "messages_json[0]",
        ),
    ],
)
def test_bad_responses_items_are_refused_naming_the_element(start_sidecar, items, field):
    sc = start_sidecar("memory://")
    with _client(sc) as c:
        with pytest.raises(InvalidArgument) as bad:
            c.append_turn("bad", items, format=RESPONSES)
        assert _field(bad).startswith(field)
        with pytest.raises(NotFound):
            c.info("bad")  # nothing stored


def test_native_payload_without_format_is_refused(start_sidecar):
    sc = start_sidecar("memory://")
    with _client(sc) as c:
        m = pb.Message(user=pb.UserMessage(text="x"))
        m.native.data = b"payload"
        with pytest.raises(InvalidArgument) as bad:
            c.append_turn("nf", [m])
        assert _field(bad) == "messages[0].native.format"


def test_a_responses_item_counts_its_text_once_against_max_message_bytes(start_sidecar):
    """The item's JSON is what the message carries; the text ctxd reads out of
    it is the same bytes again and does not count twice."""
    sc = start_sidecar("memory://", contexts__max_message_bytes=1000)
    text = "x" * 600  # item JSON ~650 bytes: within 1000 once, over it if counted twice
    with _client(sc) as c:
        c.append_turn("once", [{"role": "user", "content": text}], format=RESPONSES)
        assert _items(c, "once")[0]["content"] == text
        with pytest.raises(InvalidArgument) as big:
            c.append_turn("once", [{"role": "user", "content": "x" * 1100}], format=RESPONSES)
        assert "max_message_bytes" in str(big.value)


# -- tail reads -----------------------------------------------------------------------------
def test_tail_read_returns_the_last_n(start_sidecar):
    sc = start_sidecar("memory://", contexts__auto_compact=False)
    with _client(sc) as c:
        for i in range(10):
            c.append_turn("t", [{"user": {"text": f"u{i}"}}])
        tail = c.get("t", last_n=3).context.messages
        assert [m.user.text for m in tail] == ["u7", "u8", "u9"]
        assert [i["content"] for i in _items(c, "t", last_n=2)] == ["u8", "u9"]
        paged = c.get("t", last_n=5, page_size=2).context.messages
        assert [m.user.text for m in paged] == ["u5", "u6", "u7", "u8", "u9"]
        assert len(c.get("t", last_n=100).context.messages) == 10


def test_tail_read_bad_input(start_sidecar):
    sc = start_sidecar("memory://")
    with _client(sc) as c:
        c.append_turn("t", [{"user": {"text": "x"}}])
    stub = sc.contexts
    for req, field in (
        (pb.GetContextRequest(context_id="t", last_n=-1), "last_n"),
        (pb.GetContextRequest(context_id="t", last_n=2, since_version=1), "last_n"),
    ):
        with pytest.raises(grpc.RpcError) as bad:
            stub.GetContext(req)
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert field in bad.value.details()


# -- truncation -------------------------------------------------------------------------------
def test_truncate_pops_the_last_item_exactly_and_atomically(start_sidecar):
    sc = start_sidecar("memory://", contexts__auto_compact=False)
    items = corpus()
    with _client(sc) as c:
        r = c.append_turn("pop", items, format=RESPONSES)
        popped = c.truncate("pop", count=1, expected_version=r.version, format=RESPONSES)
        assert popped.removed == items[-1:]
        assert _items(c, "pop") == items[:-1]
        with pytest.raises(Aborted):
            c.truncate("pop", count=1, expected_version=r.version)
        assert _items(c, "pop") == items[:-1]  # the stale pop removed nothing
        two = c.truncate("pop", count=2, format=RESPONSES)
        assert two.removed == items[-3:-1]
        # New messages take new ids: ids are never reused.
        again = c.append_turn("pop", [{"role": "user", "content": "next"}], format=RESPONSES)
        assert int(again.message_ids[0][1:]) == len(items) + 1
        assert _items(c, "pop") == [*items[:-3], {"role": "user", "content": "next"}]


def test_truncate_everything_then_nothing(start_sidecar):
    sc = start_sidecar("memory://")
    with _client(sc) as c:
        c.append_turn("e", [{"user": {"text": "a"}}, {"user": {"text": "b"}}])
        gone = c.truncate("e", count=5)
        assert [m.user.text for m in gone.removed] == ["a", "b"]
        empty = c.truncate("e", count=1)
        assert empty.removed == [] and empty.version == gone.version
        assert list(c.slice("e")) == []


def test_truncate_after_a_message_id_and_incremental_reads_replace(start_sidecar):
    sc = start_sidecar("memory://")
    with _client(sc) as c:
        r = c.append_turn("a", [{"user": {"text": t}} for t in "abcde"])
        held = c.slice("a")
        out = c.truncate("a", after_message_id=r.message_ids[1])
        assert [m.user.text for m in out.removed] == ["c", "d", "e"]
        delta = c.slice("a", since_version=held.version)
        assert delta.change == "replace"
        assert [m.user.text for m in delta.messages] == ["a", "b"]


def test_truncated_messages_stay_gone_after_checkpoints_and_restart(start_sidecar, lmdb_uri):
    sc = start_sidecar(lmdb_uri, contexts__checkpoint_every=1, contexts__auto_compact=False)
    with _client(sc) as c:
        for t in "abcdef":
            c.append_turn("r", [{"user": {"text": t}}])
        handle = sc.extra["handle"]
        handle.call(sc.extra["sidecar"].domain.contexts.checkpoint_now("r"))
        c.truncate("r", count=3)  # sealed messages
        c.append_turn("r", [{"user": {"text": "g"}}])
        c.truncate("r", count=1)
        c.append_turn("r", [{"user": {"text": "h"}}])
        handle.call(sc.extra["sidecar"].domain.contexts.checkpoint_now("r"))
        before = [m.user.text for m in c.get("r").context.messages]
        assert before == ["a", "b", "c", "h"]
        info = c.info("r")
    sc.stop()
    with _client(start_sidecar(lmdb_uri)) as c:
        assert [m.user.text for m in c.get("r").context.messages] == before
        assert c.info("r").message_count == info.message_count == 4
        assert [m.id for m in c.get("r").context.messages][-1] == "m8"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({}, "count"),
        ({"count": -1}, "count"),
        ({"count": 10_001}, "count"),
        ({"count": 1, "after_message_id": "m1"}, "after_message_id"),
        ({"after_message_id": "x1"}, "after_message_id"),
        ({"count": 1, "expected_version": -2}, "expected_version"),
    ],
)
def test_truncate_bad_input_is_invalid_argument(start_sidecar, kwargs, field):
    sc = start_sidecar("memory://")
    with _client(sc) as c:
        c.append_turn("b", [{"user": {"text": "keep me"}}])
        with pytest.raises(InvalidArgument) as bad:
            c.truncate("b", **kwargs)
        assert _field(bad) == field
        assert [m.user.text for m in c.get("b").context.messages] == ["keep me"]


def test_truncate_states_it_cannot_apply(start_sidecar):
    sc = start_sidecar("memory://")
    with _client(sc) as c:
        c.append_turn("s", [{"user": {"text": "x"}}])
        with pytest.raises(FailedPrecondition):
            c.truncate("s", after_message_id="m99")
        with pytest.raises(NotFound):
            c.truncate("nobody", count=1)
        with pytest.raises(InvalidArgument) as bad:
            c.truncate("bad id", count=1)
        assert _field(bad) == "context_id"


# -- listing by prefix and empty contexts -----------------------------------------------------
def test_list_contexts_by_id_prefix(start_sidecar):
    sc = start_sidecar("memory://")
    with _client(sc) as c:
        for cid in ("app:u1:s1", "app:u1:s2", "app:u2:s1", "other"):
            c.create_context(cid)
        assert [i.id for i in c.list_contexts(id_prefix="app:u1:")] == ["app:u1:s1", "app:u1:s2"]
        assert [i.id for i in c.list_contexts(id_prefix="app:", page_size=1)] == [
            "app:u1:s1",
            "app:u1:s2",
            "app:u2:s1",
        ]
        assert [i.id for i in c.list_contexts(id_prefix="ro")] == ["root"]
        assert c.list_contexts(id_prefix="zzz") == []
        with pytest.raises(InvalidArgument) as bad:
            c.list_contexts(id_prefix="app u1")
        assert _field(bad) == "id_prefix"


def test_create_context_makes_an_empty_conversation_once(start_sidecar):
    sc = start_sidecar("memory://")
    with _client(sc) as c:
        first = c.create_context("fresh", model_window=50_000)
        assert first.created and first.info.version == 1 and first.info.message_count == 0
        assert first.info.turns == 0 and first.info.model_window == 50_000
        again = c.create_context("fresh")
        assert not again.created and again.info.version == 1
        assert list(c.slice("fresh")) == []
        c.append_turn("fresh", [{"user": {"text": "now"}}], expected_version=1)
        assert not c.create_context("fresh").created
        assert not c.create_context("root").created
        with pytest.raises(InvalidArgument) as bad:
            c.create_context("")
        assert _field(bad) == "context_id"
        with pytest.raises(InvalidArgument) as bad:
            c.create_context("ok", model_window=-5)
        assert _field(bad) == "model_window"


def test_truncated_ranges_are_forgotten_once_no_segment_holds_them(start_sidecar, lmdb_uri):
    settings = {"contexts__checkpoint_every": 1, "contexts__auto_compact": False}
    sc = start_sidecar(lmdb_uri, compaction__archive_ttl=0, **settings)
    service = sc.extra["sidecar"].domain.contexts
    with _client(sc) as c:
        for i in range(30):  # a session retrying: two items added, the last one popped
            c.append_turn("retry", [{"user": {"text": f"q{i}"}}, {"user": {"text": f"x{i}"}}])
            c.truncate("retry", count=1)
        sc.extra["handle"].call(service.checkpoint_now("retry"))
        state = service._registry.peek("retry").state
        assert len(state.cut) == 30
        c.compact("retry", keep_last=2)
        c.append_turn("retry", [{"user": {"text": "last"}}])
        sc.extra["handle"].call(service.checkpoint_now("retry"))
        assert len(state.cut) <= 3  # only those inside the segments still named
        kept = [m.user.text for m in c.get("retry").context.messages]
    sc.stop()
    with _client(start_sidecar(lmdb_uri, **settings)) as c:
        assert (
            [m.user.text for m in c.get("retry").context.messages] == kept == ["q28", "q29", "last"]
        )
