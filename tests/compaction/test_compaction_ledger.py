"""The artifact ledger: extraction per kind, dedupe, caps, merging, hostile input."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxd_sidecar.core.compaction import MessageData, Summary, ToolCallData, merge, parse_answer
from ctxd_sidecar.core.compaction.ledger import (
    DEFAULT_LEDGER_CAP,
    ENTRY_MAX_CHARS,
    HEADER,
    Artifact,
    Ledger,
    LedgerCap,
    extract,
)

M = MessageData


def kinds_of(ledger: Ledger) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for a in ledger.entries:
        out.setdefault(a.kind, []).append(a.text)
    return out


def one(text: str, kind: str = "user") -> dict[str, list[str]]:
    return kinds_of(extract([MessageData(kind, "m", text=text)]))


# -- extraction per kind ----------------------------------------------------------------


def test_paths():
    found = one(
        "edit /etc/nginx/nginx.conf, src/app/models.py and ~/notes/todo.md; see ./run.sh, "
        "README.md and the Dockerfile (not and/or, 10/20, km/h or HTTP/1.1)."
    )
    assert found["path"] == [
        "/etc/nginx/nginx.conf",
        "src/app/models.py",
        "~/notes/todo.md",
        "./run.sh",
        "README.md",
        "Dockerfile",
    ]


def test_urls_are_not_also_paths():
    found = one("open https://ci.example.com/builds/4821/log?x=1, then s3://bucket/key.tar.gz.")
    assert found["url"] == ["https://ci.example.com/builds/4821/log?x=1", "s3://bucket/key.tar.gz"]
    assert "path" not in found and "number" not in found


def test_commands_from_tool_arguments():
    calls = [
        ToolCallData("c1", "shell", json.dumps({"cmd": "pytest -q tests/test_app.py"})),
        ToolCallData("c2", "exec", json.dumps({"command": "kubectl", "args": ["get", "pods"]})),
        ToolCallData("c3", "run", json.dumps({"args": ["git", "push", "origin", "main"]})),
        ToolCallData("c4", "bash", json.dumps({"input": {"command": ["ls", "-la", "/srv"]}})),
        ToolCallData("c5", "bash", json.dumps({"script": "# setup\ncd /srv/app\nmake deploy"})),
    ]
    found = kinds_of(extract([M.assistant("a", "", *calls)]))
    assert found["command"] == [
        "pytest -q tests/test_app.py",
        "kubectl get pods",
        "git push origin main",
        "ls -la /srv",
        "cd /srv/app",
        "make deploy",
    ]
    # values that are artifacts themselves are named by key only
    assert found["tool"] == [
        "shell(cmd)",
        "exec(command, args)",
        "run(args)",
        "bash(input)",
        "bash(script)",
    ]
    assert "tests/test_app.py" in found["path"]


def test_commands_from_text():
    text = (
        "Run `pytest -x tests/` first (not `foo` or `some words`).\n"
        "```bash\n# comment\ncd /srv/app\nmake deploy ENV=prod\n```\n"
        "```console\n$ docker ps -a\nCONTAINER ID   IMAGE\n```\n"
        "$ journalctl -u ctxd --since today\n"
    )
    assert one(text, "assistant")["command"] == [
        "cd /srv/app",
        "make deploy ENV=prod",
        "docker ps -a",
        "journalctl -u ctxd --since today",
        "pytest -x tests/",
    ]
    assert "command" not in one(text, "note")  # only user and assistant text


def test_a_backticked_program_with_flags_is_a_command_whatever_the_program():
    text = "Then `wc -l data/orders.csv` and `mytool --dry-run`, not `x = -1` or `a b`."
    assert one(text, "assistant")["command"] == ["wc -l data/orders.csv", "mytool --dry-run"]


def test_identifiers_and_numbers():
    found = one(
        "ticket OPS-1234 and ORD-2024-118734, request 3f2b1c4e-1111-2222-3333-444455556666, "
        "commit a1b2c3d4e5, customer cus_9Zk2ab, PR #482, order 4471, invoice no. 88213409, "
        "not UTF-8, SHA-256 or the year 2024"
    )
    assert found["id"] == [
        "OPS-1234",
        "ORD-2024-118734",
        "3f2b1c4e-1111-2222-3333-444455556666",
        "a1b2c3d4e5",
        "cus_9Zk2ab",
        "#482",
    ]
    assert found["number"] == ["4471", "88213409"]


def test_error_codes():
    found = one(
        "error[E0308] then TS2345; got HTTP 503 and later 502 Bad Gateway, status: 429; "
        "ENOENT, ECONNREFUSED; ModuleNotFoundError; killed by SIGKILL (OOMKilled), exit code 137"
    )
    assert found["error"] == [
        "E0308",
        "TS2345",
        "HTTP 503",
        "502 Bad Gateway",
        "status: 429",
        "ENOENT",
        "ECONNREFUSED",
        "ModuleNotFoundError",
        "SIGKILL",
        "OOMKilled",
        "exit code 137",
    ]


def test_tool_results_json_and_text():
    result = {"stdout": "wrote /var/log/app.log", "meta": {"trace": "ab12cd34ef", "n": 1234567}}
    found = kinds_of(
        extract(
            [
                M.tool("t1", "c1", "shell", json.dumps(result)),
                M.tool("t2", "c2", "fetch", "HTTP 500 from https://api.test/v1", is_error=True),
            ]
        )
    )
    assert found["path"] == ["/var/log/app.log"]
    assert found["id"] == ["ab12cd34ef"]
    assert found["number"] == ["1234567"]
    assert found["error"] == ["HTTP 500"]
    assert found["url"] == ["https://api.test/v1"]
    assert "tool" not in found and "command" not in found


def test_tool_names_with_key_arguments():
    call = ToolCallData(
        "c1",
        "read_file",
        json.dumps({"path": "/a.py", "start": 10, "body": "x" * 500, "lines": "multi\nline"}),
    )
    found = kinds_of(extract([M.assistant("a", "", call, ToolCallData("c2", "ping", "{}"))]))
    assert found["tool"] == ["read_file(path, start=10, body)", "ping()"]
    call = ToolCallData("c3", "deploy", json.dumps({"env": "prod", "replicas": 3}))
    assert kinds_of(extract([M.assistant("a", "", call)]))["tool"] == [
        "deploy(env=prod, replicas=3)"
    ]


def test_deterministic():
    messages = [M.user(f"u{i}", f"fix src/m{i}.py for OPS-{100 + i}") for i in range(50)]
    assert extract(messages) == extract(list(messages))


# -- dedupe, recency, caps ------------------------------------------------------------------


def test_dedupe_keeps_the_latest_sighting():
    messages = [
        MessageData("user", "a", text="see src/app.py and OPS-12", seq=3),
        MessageData("user", "b", text="now tests/x.py", seq=7),
        MessageData("user", "c", text="back to src/app.py; OPS-12 again.", seq=9),
    ]
    ledger = extract(messages)
    assert [(a.kind, a.text, a.seq) for a in ledger.entries] == [
        ("path", "tests/x.py", 7),
        ("path", "src/app.py", 9),
        ("id", "OPS-12", 9),
    ]


def test_dedupe_keys_per_kind():
    ledger = Ledger(
        (
            Artifact("error", "HTTP 503", 1),
            Artifact("error", "503 Service Unavailable", 2),
            Artifact("id", "ABC-1", 3),
            Artifact("id", "abc-1", 4),
            Artifact("url", "https://x.test/", 5),
            Artifact("url", "https://x.test", 6),
            Artifact("path", "src/A.py", 7),
            Artifact("path", "src/a.py", 8),
        )
    ).capped()
    assert ledger.texts() == [
        "503 Service Unavailable",
        "abc-1",
        "https://x.test",
        "src/A.py",
        "src/a.py",
    ]


def test_position_is_the_seq_without_one():
    ledger = extract([M.user("a", "x/a.py"), M.user("b", "x/b.py")])
    assert [a.seq for a in ledger.entries] == [0, 1]


def test_cap_on_items_keeps_the_most_recent():
    messages = [MessageData("user", f"u{i}", text=f"OPS-{1000 + i}", seq=i) for i in range(300)]
    ledger = extract(messages)
    assert len(ledger) == DEFAULT_LEDGER_CAP.items == 256
    assert ledger.texts()[0] == "OPS-1044" and ledger.texts()[-1] == "OPS-1299"
    small = extract(messages, LedgerCap(items=5))
    assert small.texts() == [f"OPS-{1295 + i}" for i in range(5)]


def test_cap_on_bytes_keeps_the_most_recent():
    messages = [
        MessageData("user", f"u{i}", text=f"/srv/{'d' * 60}/file{i}.py", seq=i) for i in range(200)
    ]
    ledger = extract(messages)
    assert ledger.byte_size() == len(ledger.render().encode()) <= DEFAULT_LEDGER_CAP.bytes
    assert len(ledger) < 200
    assert ledger.texts()[-1].endswith("file199.py")
    n = len(ledger)
    assert [t.rsplit("file", 1)[1] for t in ledger.texts()] == [
        f"{i}.py" for i in range(200 - n, 200)
    ]
    tiny = extract(messages, LedgerCap(bytes=300))
    assert tiny.byte_size() <= 300 and tiny.texts()[-1].endswith("file199.py")


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.text(alphabet="abcxyz/._-: 0123456789ABC`$\n", max_size=80), max_size=30),
    st.integers(1, 40),
    st.integers(256, 2000),
)
def test_rendered_size_is_exact_and_within_the_cap(texts, items, size):
    cap = LedgerCap(items=items, bytes=size)
    ledger = extract([MessageData("assistant", f"m{i}", text=t) for i, t in enumerate(texts)], cap)
    assert ledger.byte_size() == len(ledger.render().encode("utf-8"))
    assert ledger.byte_size() <= size and len(ledger) <= items


def test_an_entry_inside_a_newer_one_is_not_listed_again():
    messages = [
        MessageData("user", "a", text="order 7310000 and src/a.py", seq=1),
        MessageData(
            "user", "b", text="see https://x.test/o/7310000 and `pytest src/a.py -x`", seq=2
        ),
        MessageData("user", "c", text="then https://x.test/o/7310000/items", seq=3),
    ]
    ledger = extract(messages)
    # the order number and the shorter URL are inside newer entries; src/a.py
    # is seen again in the same message as the command, so it stays
    assert ledger.texts() == ["pytest src/a.py -x", "src/a.py", "https://x.test/o/7310000/items"]
    rendered = ledger.render()
    assert all(t in rendered for t in ("7310000", "src/a.py", "https://x.test/o/7310000"))


def test_long_entries_are_clipped():
    ledger = extract([M.user("a", "/" + "p" * 1000 + ".py")])
    (text,) = ledger.texts()
    assert len(text) == ENTRY_MAX_CHARS and text.endswith("…")


# -- merging across compactions ---------------------------------------------------------------


def test_merge_across_compactions():
    first = extract([MessageData("user", "a", text="src/a.py OPS-11 https://x.test/1", seq=1)])
    second = extract([MessageData("user", "b", text="src/b.py and again src/a.py", seq=5)])
    merged = first.merged(second)
    assert merged.texts() == ["OPS-11", "https://x.test/1", "src/b.py", "src/a.py"]
    assert [a.seq for a in merged.entries] == [1, 1, 5, 5]
    # an older sighting never lowers the recency of a newer one
    assert second.merged(first).entries[-1] == Artifact("path", "src/a.py", 5)
    # past the cap the oldest go
    assert first.merged(second, LedgerCap(items=2)).texts() == ["src/b.py", "src/a.py"]


# -- hostile input ------------------------------------------------------------------------


def test_deep_nesting_and_huge_integers():
    deep = "[" * 1000 + '"/deep/file.py"' + "]" * 1000
    deeper = '{"a":' * 5000 + '"/deeper/x.py"' + "}" * 5000
    huge = "9" * 5000
    calls = [ToolCallData("c1", "t", deep), ToolCallData("c2", "t", '{"n": ' + huge + "}")]
    messages = [
        M.assistant("a", "", *calls),
        M.tool("t1", "c1", "t", deep),
        M.tool("t2", "c2", "t", deeper),
        M.tool("t3", "c3", "t", json.dumps({"big": int("1" * 100)}) + huge),
        M.tool("t4", "c4", "t", '{"n": ' + huge + ', "path": "/huge/n.py"}'),
        M.user("u", huge),
    ]
    found = kinds_of(extract(messages))
    assert {"/deep/file.py", "/deeper/x.py", "/huge/n.py"} <= set(found["path"])
    assert all(len(n) <= ENTRY_MAX_CHARS for n in found["number"])


def test_a_huge_tool_result_is_scanned_in_bounded_time():
    content = ("x " * 2_000_000) + "/tail/file.py"
    ledger = extract([M.tool("t", "c", "t", content)])
    assert ledger.texts() == ["/tail/file.py"]


@settings(max_examples=80, deadline=None)
@given(st.text(max_size=400), st.text(max_size=200))
def test_any_text_extracts_without_exceptions(content, arguments):
    messages = [
        M.assistant("a", content, ToolCallData("c", "t", arguments)),
        M.tool("t", "c", "t", content),
        M.user("u", content),
    ]
    ledger = extract(messages)
    assert ledger.byte_size() <= DEFAULT_LEDGER_CAP.bytes


# -- rendering and the summary ----------------------------------------------------------------


def test_render_format():
    ledger = Ledger(
        (
            Artifact("command", "git push origin main", 2),
            Artifact("path", "/a.py", 1),
            Artifact("path", "b, c.py", 3),
            Artifact("error", "HTTP 503", 4),
        )
    )
    assert ledger.render() == "\n".join(
        [
            HEADER,
            "paths: /a.py, b, c.py",
            "commands:",
            "  git push origin main",
            "errors: HTTP 503",
        ]
    )
    assert Ledger().render() == ""


def test_summary_round_trip_with_and_without_ledger():
    plain = Summary(goals=["ship"], covers_messages=3, updated_ms=9)
    assert "ledger" not in plain.to_dict()
    assert Summary.from_dict(plain.to_dict()) == plain
    old_record = {"goals": ["ship"], "covers_messages": 3, "updated_ms": 9}
    assert Summary.from_dict(old_record) == plain
    ledger = extract([MessageData("user", "a", text="fix src/a.py for OPS-7", seq=4)])
    full = Summary(goals=["ship"], ledger=ledger)
    stored = json.loads(json.dumps(full.to_dict()))
    assert Summary.from_dict(stored) == full
    assert Summary.from_dict(
        {"ledger": [["path", "x.py", 1], ["bogus"], ["url", 3, 1]]}
    ).ledger == (Ledger((Artifact("path", "x.py", 1),)))


def test_summary_renders_the_ledger_last():
    ledger = extract([M.user("a", "src/a.py")])
    text = Summary(facts=["f"], narrative="n", ledger=ledger).render()
    assert text.endswith(f"n\n{HEADER}\npaths: src/a.py")
    assert not Summary(ledger=ledger).is_empty()


def test_merge_never_loses_the_ledger():
    folded = [MessageData("user", "a", text="deploy with `make deploy` to https://x.test", seq=1)]
    first = merge(None, parse_answer('{"goals": ["deploy"]}'), folded=folded, now_ms=1)
    assert first.ledger.texts() == ["make deploy", "https://x.test"]
    # the next answer (from a model) has no ledger, and one that tries to set
    # it is not read: the ledger survives and grows
    answer = parse_answer('{"facts": ["done"], "ledger": [], "artifacts": ["x"]}')
    assert not answer.ledger
    folded2 = [MessageData("user", "b", text="now src/b.py", seq=8)]
    second = merge(first, answer, folded=folded2, now_ms=2)
    assert second.ledger.texts() == ["make deploy", "https://x.test", "src/b.py"]
    third = merge(second, Summary(narrative="x"), now_ms=3)
    assert third.ledger == second.ledger
    capped = merge(second, Summary(), ledger_cap=LedgerCap(items=1))
    assert capped.ledger.texts() == ["src/b.py"]


def test_invalid_cap():
    with pytest.raises(ValueError):
        LedgerCap(items=0)
    with pytest.raises(ValueError):
        LedgerCap(bytes=10)


# -- the two scanning paths agree ----------------------------------------------------------

WORDS = [
    "the", "Deploy", "src/app.py", "/etc/x.toml", "HTTP", "503", "status:", "429", "exit",
    "code", "137", "order", "4471", "OPS-1234", "a1b2c3d4", "cus_9Zk2", "#482", "1234567",
    "ENOENT", "KeyError", "https://x.test/a?b=1", "(see", "README.md).", "and/or", "10/20",
    "Bad", "Gateway", "502", "Dockerfile", "\n", "x" * 30, "502 Bad Gateway", "HTTP/1.1 500",
    "exit status 2", "invoice no. 381", "order #4471",
    "The", "The,", "Dog's", "ValueError", "OOMKilled", "iPhone", "Über", "X-Request-Id",
    "Foo-123", "Makefile.", "Config.yaml", "Foo_bar1", "Tab\tThe", "Jenkinsfile",
    "CrashLoopBackOff",
]  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(WORDS), max_size=60))
def test_dense_and_sparse_scanning_agree(words):
    from ctxd_sidecar.core.compaction import ledger_scan

    text = " ".join(words)
    original = ledger_scan._dense
    try:
        ledger_scan._dense = lambda _text: True
        dense = list(ledger_scan.text_artifacts(text))
        ledger_scan._dense = lambda _text: False
        sparse = list(ledger_scan.text_artifacts(text))
    finally:
        ledger_scan._dense = original
    assert dense == sparse


def test_extract_reads_newest_first_within_a_budget():
    old = [M.user(f"o{i}", f"old/file{i}.py " + "w " * 500) for i in range(10)]
    new = [M.user("n", "new/file.py")]
    assert extract([*old, *new], max_chars=1100).texts() == ["old/file9.py", "new/file.py"]
    assert len(extract([*old, *new]).texts()) == 11


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True)
    | st.text(alphabet='ab/._-: 0123456789`$\n{}[]"', max_size=40),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=120, deadline=None)
@given(json_values, st.sampled_from(["cmd", "command", "args", "script", "path"]))
def test_any_json_extracts_without_exceptions(value, key):
    text = json.dumps(value)
    wrapped = json.dumps({key: value})
    messages = [
        M.assistant("a", "", ToolCallData("c", "t", text), ToolCallData("d", "t", wrapped)),
        M.tool("t", "c", "t", text),
    ]
    ledger = extract(messages, LedgerCap(items=20, bytes=600))
    assert ledger.byte_size() == len(ledger.render().encode()) <= 600 and len(ledger) <= 20
