"""Summariser plugins: the OpenAI-compatible one against a real HTTP server on
loopback, the extractive fallback, multi-pass folding, plugin discovery."""

from __future__ import annotations

import json
import logging
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxd_plugins.extractive_summariser import ExtractiveSummariser, extract
from ctxd_plugins.openai_summariser import OpenAIConfig, OpenAISummariser
from ctxd_sidecar import config as config_mod
from ctxd_sidecar.config.loader import load_config
from ctxd_sidecar.core import errors
from ctxd_sidecar.core.compaction import (
    MalformedAnswer,
    MessageData,
    SummariserError,
    Summary,
    ToolCallData,
    estimate_text,
    merge,
    summarise,
)
from ctxd_sidecar.core.compaction.summarise import WINDOW_SAFETY
from ctxd_sidecar.plugin import manager as plugins_mod
from ctxd_sidecar.plugin.spec import hookimpl
from tests.support.fake_openai import FakeOpenAI

M = MessageData
KEY = "sk-test-0123456789abcdef"


@pytest.fixture
def fake():
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def make_summariser(fake):
    made: list[OpenAISummariser] = []

    def make(**kw) -> OpenAISummariser:
        settings = {"base_url": fake.base_url, "model": "summ-1", "max_retries": 0, "timeout": 10}
        summariser = OpenAISummariser(**(settings | kw))
        made.append(summariser)
        return summariser

    yield make
    for summariser in made:
        await summariser.aclose()


def transcript(n: int = 6, chars: int = 40) -> list[MessageData]:
    out: list[MessageData] = []
    for i in range(n):
        if i % 3 == 0:
            out.append(M.user(f"m{i}", f"request {i}: " + "u" * chars))
        elif i % 3 == 1:
            out.append(
                M.assistant(
                    f"m{i}", f"on it {i}", ToolCallData(f"call_{i}", "read_file", '{"path": "/a"}')
                )
            )
        else:
            out.append(M.tool(f"m{i}", f"call_{i - 1}", "read_file", "t" * chars))
    return out


# -- the OpenAI-compatible summariser ---------------------------------------------------


async def test_summarises_through_chat_completions(fake, make_summariser):
    summariser = make_summariser(api_key=KEY)
    previous = Summary(goals=["earlier goal"])
    result = await summarise(summariser, transcript(), previous, instructions="keep paths")
    assert result.summariser == "openai" and result.passes == 1 and result.elided == 0
    s = result.summary
    assert s.facts == ["covered m0..m5", "6 entries"]
    assert s.goals == ["goal seen in m0..m5"]
    assert s.covers_messages == 6
    assert "earlier goal" not in s.goals  # the result is what the fold adds

    (req,) = fake.requests
    body = req.body
    assert body["model"] == "summ-1" and body["temperature"] == 0
    assert body["max_tokens"] == summariser.max_output_tokens
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"]["required"] == [
        "goals",
        "decisions",
        "open",
        "facts",
    ]
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert req.system.endswith("keep paths")
    assert "- earlier goal" in req.user
    assert req.message_ids() == [f"m{i}" for i in range(6)]
    assert "read_file#call_1" in req.user
    assert req.headers["authorization"] == f"Bearer {KEY}"


@pytest.mark.parametrize("source", ["inline", "file", "env"])
async def test_api_key_comes_from_config_file_or_environment(fake, tmp_path, source):
    cfg = OpenAIConfig(base_url=fake.base_url, model="m")
    env = {}
    if source == "inline":
        cfg.api_key = KEY
    elif source == "file":
        (tmp_path / "key").write_text(KEY + "\n")
        cfg.api_key_file = str(tmp_path / "key")
    else:
        cfg.api_key_env = "SUMMARY_KEY"
        env = {"SUMMARY_KEY": KEY}
    fake.require_key = KEY
    summariser = OpenAISummariser.from_config(cfg, env=env)
    try:
        result = await summarise(summariser, transcript(3))
    finally:
        await summariser.aclose()
    assert result.summary.facts[0] == "covered m0..m2"
    assert KEY not in repr(summariser) and KEY not in repr(cfg)


def test_unreadable_key_file_is_a_config_error(tmp_path):
    cfg = OpenAIConfig(
        base_url="http://127.0.0.1:1/v1",
        model="m",
        api_key_file=str(tmp_path / "missing"),
    )
    with pytest.raises(ValueError, match="summariser.openai.api_key_file"):
        OpenAISummariser.from_config(cfg, env={})


async def test_wrong_key_is_refused_without_revealing_it(fake, make_summariser, caplog):
    caplog.set_level(logging.DEBUG)
    fake.require_key = "the-right-key"
    summariser = make_summariser(api_key=KEY)
    with pytest.raises(SummariserError) as exc:
        await summarise(summariser, transcript(3))
    assert exc.value.reason == "rejected" and "401" in exc.value.message
    assert KEY not in exc.value.message
    assert all(KEY not in r.getMessage() and KEY not in str(r.__dict__) for r in caplog.records)


@pytest.mark.parametrize("mode", ["fenced", "json"])
async def test_fenced_and_bare_json_answers(fake, make_summariser, mode):
    fake.mode = mode
    result = await summarise(make_summariser(), transcript(3))
    assert result.summary.facts == ["covered m0..m2", "3 entries"]


async def test_plain_text_answer_becomes_the_narrative(fake, make_summariser):
    fake.mode = "plain"
    result = await summarise(make_summariser(), transcript(3))
    assert result.summary.goals == [] and "/srv/billing.py" in result.summary.narrative
    assert result.summary.covers_messages == 3


@pytest.mark.parametrize(
    ("mode", "words"),
    [
        ("malformed", "not valid JSON"),
        ("empty", "no content"),
        ("length", "cut off at"),
    ],
)
async def test_malformed_answers_are_a_summariser_error(fake, make_summariser, mode, words):
    fake.mode = mode
    with pytest.raises(MalformedAnswer) as exc:
        await summarise(make_summariser(), transcript(3))
    assert words in exc.value.message and exc.value.message.startswith("summariser 'openai'")
    assert not isinstance(exc.value, errors.Unavailable)


async def test_timeout_is_unavailable(fake, make_summariser):
    fake.mode, fake.delay = "slow", 30
    summariser = make_summariser(timeout=0.3)
    with pytest.raises(errors.Unavailable) as exc:
        await summarise(summariser, transcript(3))
    assert "did not answer within 0.3s" in exc.value.message
    assert len(fake.requests) == 1  # max_retries=0


@pytest.mark.parametrize("mode", ["error500", "rate_limited"])
async def test_server_errors_are_retried_then_unavailable(fake, make_summariser, mode):
    fake.mode = mode
    with pytest.raises(errors.Unavailable):
        await summarise(make_summariser(max_retries=2), transcript(3))
    assert len(fake.requests) == 3


async def test_a_transient_error_then_success(fake, make_summariser):
    fake.script.extend(["error500"])
    result = await summarise(make_summariser(max_retries=1), transcript(3))
    assert result.summary.facts[0] == "covered m0..m2" and len(fake.requests) == 2


async def test_unreachable_server_is_unavailable(make_summariser):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    summariser = make_summariser(base_url=f"http://127.0.0.1:{port}/v1")
    with pytest.raises(errors.Unavailable, match="unreachable"):
        await summarise(summariser, transcript(3))


async def test_falls_back_when_the_server_rejects_response_format(fake, make_summariser):
    fake.mode = "reject_response_format"
    summariser = make_summariser()
    result = await summarise(summariser, transcript(3))
    assert result.summary.facts[0] == "covered m0..m2"
    formats = [r.body.get("response_format", {}).get("type") for r in fake.requests]
    assert formats == ["json_schema", "json_object", None]
    await summarise(summariser, transcript(3))  # remembered: no more rejected requests
    assert len(fake.requests) == 4 and "response_format" not in fake.requests[-1].body


async def test_json_object_is_used_where_json_schema_is_not_supported(fake, make_summariser):
    fake.mode = "reject_json_schema"
    await summarise(make_summariser(), transcript(3))
    assert [r.body.get("response_format", {}).get("type") for r in fake.requests] == [
        "json_schema",
        "json_object",
    ]


async def test_max_completion_tokens_for_servers_that_reject_max_tokens(fake, make_summariser):
    fake.mode = "reject_max_tokens"
    summariser = make_summariser(max_output_tokens=777)
    await summarise(summariser, transcript(3))
    last = fake.requests[-1].body
    assert "max_tokens" not in last and last["max_completion_tokens"] == 777
    assert last["response_format"]["type"] == "json_schema"  # kept


# -- fitting the summariser's window ------------------------------------------------------


async def test_folds_in_several_passes_when_the_excerpt_exceeds_the_window(fake, make_summariser):
    summariser = make_summariser(window=2000, max_output_tokens=300)
    folded = transcript(60, chars=300)
    previous = Summary(facts=["from an earlier compaction"])
    result = await summarise(summariser, folded, previous)
    assert result.passes == len(fake.requests) > 2
    assert result.elided == 0
    seen = [i for r in fake.requests for i in r.message_ids()]
    assert seen == [m.id for m in folded]  # each message in exactly one pass, in order
    for r in fake.requests:
        request_tokens = estimate_text(r.system) + estimate_text(r.user)
        assert request_tokens + 300 <= 2000 * WINDOW_SAFETY
        assert "- from an earlier compaction" in r.user
    # later passes see what the earlier ones produced
    first_ids = fake.requests[0].message_ids()
    assert f"covered {first_ids[0]}..{first_ids[-1]}" in fake.requests[1].user
    s = result.summary
    spans = [f"covered {r.message_ids()[0]}..{r.message_ids()[-1]}" for r in fake.requests]
    assert [f for f in s.facts if f.startswith("covered")] == spans
    assert s.covers_messages == 60
    assert "from an earlier compaction" not in s.facts
    merged = merge(previous, s)
    assert merged.facts[0] == "from an earlier compaction"


async def test_passes_are_bounded_and_the_excerpt_trimmed(fake, make_summariser):
    summariser = make_summariser(window=2000, max_output_tokens=300)
    folded = transcript(300, chars=2000)
    result = await summarise(summariser, folded, max_passes=3)
    assert result.passes == len(fake.requests) <= 3
    assert result.elided > 0
    seen = [i for r in fake.requests for i in r.message_ids()]
    ids = [m.id for m in folded]
    assert len(seen) + result.elided == len(folded)
    assert seen == sorted(seen, key=ids.index) and seen[-1] == ids[-1]
    assert seen[0] != ids[0]  # the oldest are left out first
    assert "earlier messages elided" in fake.requests[0].user
    for r in fake.requests:
        assert estimate_text(r.system) + estimate_text(r.user) + 300 <= 1800


async def test_window_too_small_is_reported(fake, make_summariser):
    summariser = make_summariser(window=1500, max_output_tokens=1000)
    with pytest.raises(SummariserError) as exc:
        await summarise(summariser, transcript(3))
    assert exc.value.reason == "window_too_small" and "max_output_tokens" in exc.value.message
    assert fake.requests == []


# -- the extractive fallback ------------------------------------------------------------


def work_transcript() -> list[MessageData]:
    return [
        M.system("m0", "Answer in English."),
        M.user("m1", "Migrate billing to Postgres 16. Can you check /srv/billing.py first?"),
        M.assistant(
            "m2",
            "Sure. I will read the file.",
            ToolCallData("call_1", "read_file", '{"path": "/srv/billing.py"}'),
        ),
        M.tool("m3", "call_1", "read_file", '{"tables": 3, "db": "mysql://db:3306/billing"}'),
        M.assistant("m4", "We decided to use pg_dump. Next step: schedule the downtime."),
        M.tool("m5", "call_2", "migrate", "connection refused", is_error=True),
        M.note("m6", "user went idle"),
        M.user("m7", "ok", principal="bob"),
    ]


def test_extractive_rules():
    s = extract(work_transcript())
    # "ok" is filler, not a goal.
    assert s.goals == ["Migrate billing to Postgres 16."]
    # The question was answered ("Sure. I will read the file."): not open.
    assert s.open == ["Next step: schedule the downtime."]
    # "I will read the file." is an action, not a decision.
    assert s.decisions == ["We decided to use pg_dump."]
    assert s.facts == [
        "system: Answer in English.",
        "read_file#call_1: tables=3, db=mysql://db:3306/billing",
        "migrate#call_2: failed: connection refused",
        "note: user went idle",
    ]
    assert s.narrative == ""
    assert extract(work_transcript()) == s  # deterministic


def test_extractive_caps_keep_the_newest():
    many = [M.tool(f"m{i}", f"c{i}", "probe", f"value {i}") for i in range(50)]
    s = extract(many, cap=10)
    assert s.facts == [f"probe#c{i}: value {i}" for i in range(40, 50)]


def test_extractive_with_nothing_to_extract_says_so():
    s = extract([M.assistant("m1", "ok"), M.user("m2", "")])
    assert s.narrative.startswith("2 earlier messages were folded")


async def test_extractive_through_summarise_needs_no_excerpt():
    folded = work_transcript() * 200  # no window: one pass, whatever the size
    result = await summarise(ExtractiveSummariser(), folded)
    assert result.passes == 1 and result.summariser == "extractive"
    assert result.summary.covers_messages == len(folded)
    assert result.summary.facts[0] == "system: Answer in English."


# -- plugins -----------------------------------------------------------------------------


def test_plugins_offer_extractive_and_openai_when_configured():
    cfg = config_mod.Config()
    found = plugins_mod.summarisers(cfg)
    assert list(found) == ["extractive"]
    cfg = load_config(
        env={},
        overrides={
            "summariser.openai.base_url": "http://127.0.0.1:8000/v1",
            "summariser.openai.model": "llama",
        },
    )
    found = plugins_mod.summarisers(cfg)
    assert list(found) == ["extractive", "openai"]
    assert found["openai"].model == "llama" and found["openai"].window_tokens == 32_768


def test_a_third_party_summariser_overrides_a_built_in_name_with_a_warning(caplog):
    class Custom:
        def __init__(self, name):
            self.name = name
            self.window_tokens = None
            self.max_output_tokens = 0

        async def summarise(self, request):
            return Summary(facts=["custom"])

    class ThirdParty:
        @hookimpl
        def ctxd_summarisers(self, config):
            return [Custom("extractive"), Custom("custom")]

    pm = plugins_mod.plugin_manager()
    pm.register(ThirdParty(), name="third-party")
    found = plugins_mod.summarisers(config_mod.Config(), pm)
    assert isinstance(found["extractive"], Custom)
    assert isinstance(found["custom"], Custom)
    (warning,) = [r for r in caplog.records if "overridden" in r.getMessage()]
    assert warning.summariser == "extractive" and warning.plugin == "third-party"
    assert warning.overrides == ["ctxd_plugins.extractive_summariser"]


async def test_a_failing_plugin_becomes_a_summariser_error():
    class Broken:
        name = "broken"
        window_tokens = None
        max_output_tokens = 0

        async def summarise(self, request):
            raise KeyError("bug")

    with pytest.raises(SummariserError) as exc:
        await summarise(Broken(), transcript(3))
    assert exc.value.reason == "failed" and "broken" in exc.value.message


def test_compaction_config_from_file_and_environment(tmp_path):
    path = tmp_path / "ctxd.toml"
    path.write_text(
        '[compaction]\nsummariser = "openai"\nlist_cap = 16\n'
        '[summariser.openai]\nbase_url = "http://127.0.0.1:11434/v1"\nmodel = "qwen2.5"\n'
    )
    cfg = load_config(
        config_file=str(path), env={"CTXD_SUMMARISER_OPENAI_WINDOW": "8192"}, overrides={}
    )
    assert cfg.compaction.summariser == "openai" and cfg.compaction.list_cap == 16
    assert cfg.table("summariser.openai", OpenAIConfig).window == 8192
    assert cfg.warnings == ()
    with pytest.raises(ValueError, match="summariser.openai.base_url"):
        load_config(env={"CTXD_COMPACTION_SUMMARISER": "openai"})
    with pytest.raises(ValueError, match="summariser.openai.response_format"):
        load_config(env={"CTXD_SUMMARISER_OPENAI_RESPONSE_FORMAT": "xml"})
    with pytest.raises(ValueError, match="list_cap"):
        load_config(env={"CTXD_COMPACTION_LIST_CAP": "0"})


def test_fake_server_records_json_bodies(fake):
    # the fake is real HTTP: a raw request gets a chat.completion back
    import urllib.request

    req = urllib.request.Request(
        fake.base_url + "/chat/completions",
        data=json.dumps(
            {"model": "x", "messages": [{"role": "user", "content": "[m1 user] hi"}]}
        ).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        body = json.load(resp)
    assert body["object"] == "chat.completion"
    assert json.loads(body["choices"][0]["message"]["content"])["facts"][0] == "covered m1..m1"


# -- the extractive summariser's word search --------------------------------------------------

#: Its words, in other cases, inside other words and next to punctuation.
_SENTENCE_WORDS = [
    "TODO", "To do", "next Steps", "Pending,", "still need", "NEED TO", "needs to", "follow-up",
    "Follow up", "waiting.", "blocked!", "not yet", "TBD", "Decided", "we'll use", "We will use",
    "going with", "go With", "went with", "chose", "Chosen", "agreed", "settled", "switch to",
    "Switched to", "instead", "plan to", "opted", "prefers", "stick with", "keep using", "will",
    "use", "willing", "house", "context", "the", "fox", "to", "do", "need", "still", "going",
    "plan", "switch", ".", "?", "\n", "Ünïcode", "ſ",
]  # fmt: skip
_IGNORING_CASE = {
    "open": r"\b(todo|to do|next steps?|pending|still need|needs? to|remaining|follow[- ]up|"
    r"waiting|blocked|not yet|tbd)\b",
    "decision": r"\b(decided|decide|decision|chose|choose|chosen|agreed|agree|settled|opted|"
    r"go with|going with|went with|switch to|switched to|switching to|instead|we'll use|"
    r"we will use|will use|let's use|stick with|keep using|plan to|we'll keep|we will keep|"
    r"prefer)\b",
}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_SENTENCE_WORDS), max_size=30))
def test_the_word_search_finds_what_a_case_insensitive_search_finds(words):
    import re

    from ctxd_plugins import extractive_summariser as ex

    text = " ".join(words)
    low = text.lower()
    for name, pattern in (("open", ex._OPEN_WORDS), ("decision", ex._DECISION_WORDS)):
        expected = bool(re.search(_IGNORING_CASE[name], text, re.IGNORECASE))
        assert bool(pattern.search(low)) == expected, name
        if expected:  # the substring check never skips a text with a match
            assert ex._may_name_work(low)
