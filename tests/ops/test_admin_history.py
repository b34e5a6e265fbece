"""``ctxd contexts history / show ID@V / fork / diff``: the real console
script against a real sidecar on LMDB."""

from __future__ import annotations

import json

import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as cpb
from tests.ops.test_admin import ctxd, one_line_error, served  # noqa: F401  (fixture)


def _say(sc, cid: str, *texts: str) -> None:
    for text in texts:
        sc.contexts.AppendTurn(
            cpb.AppendTurnRequest(
                context_id=cid, messages=[cpb.Message(user=cpb.UserMessage(text=text))]
            ),
            timeout=10,
        )


def _json(*args: str) -> dict:
    proc = ctxd(*args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_history_show_at_a_version_fork_and_diff(served):  # noqa: F811 - the fixture imported above
    _history_show_fork_diff(served)


@pytest.mark.parametrize("backend", ["s3", "postgres"])
def test_history_verbs_on_the_shared_stores(start_sidecar, store_uri_for, backend):
    _history_show_fork_diff(start_sidecar(store_uri_for(backend)))


def _history_show_fork_diff(served) -> None:  # noqa: F811 - the fixture imported above
    at = ("--address", served.address)
    _say(served, "h", "one", "two", "three")

    table = ctxd("contexts", "history", "h", *at)
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[0].split() == ["VERSION", "KIND", "TIME", "MESSAGES", "TOKENS"]
    assert "the oldest readable is 1" in table.stdout
    kept = _json("contexts", "history", "h", *at)
    assert [(int(v["version"]), v["kind"]) for v in kept["versions"]] == [
        (3, "turn"),
        (2, "turn"),
        (1, "turn"),
    ]
    assert [int(v["message_count"]) for v in kept["versions"]] == [3, 2, 1]

    then = _json("contexts", "show", "h@2", *at)
    assert int(then["version"]) == 2
    assert [m["user"]["text"] for m in then["messages"]] == ["one", "two"]
    shown = ctxd("contexts", "show", "h@1", *at)
    assert shown.returncode == 0 and "one" in shown.stdout and "two" not in shown.stdout

    forked = ctxd("contexts", "fork", "h@2", "g", *at)
    assert forked.returncode == 0, forked.stderr
    assert forked.stdout.strip() == "forked h@2 -> g (version 3)"
    latest = _json("contexts", "fork", "h", "g2", *at)
    assert (latest["forked_from"], int(latest["forked_at_version"])) == ("h", 3)
    _say(served, "g", "only in g")
    _say(served, "h", "four")

    diff = _json("contexts", "diff", "h", "g", *at)
    assert (diff["a"], diff["b"], diff["common"]) == ("h@4", "g@4", 2)
    assert [m["user"]["text"] for m in diff["a_adds"]] == ["three", "four"]
    assert [m["user"]["text"] for m in diff["b_adds"]] == ["only in g"]
    same = _json("contexts", "diff", "h@2", "g@3", *at)
    assert (same["common"], same["a_adds"], same["b_adds"]) == (2, [], [])
    text = ctxd("contexts", "diff", "h", "g", *at)
    assert text.returncode == 0
    assert "h@4 and g@4 share 2 messages and part after message" in text.stdout
    assert "h@4 adds 2 messages" in text.stdout and "g@4 adds 1 messages" in text.stdout


def test_history_verbs_fail_in_one_line(served):  # noqa: F811 - the fixture imported above
    at = ("--address", served.address)
    _say(served, "h", "one", "two")
    _say(served, "taken", "mine")
    assert "OUT_OF_RANGE" in one_line_error(ctxd("contexts", "show", "h@9", *at))
    assert one_line_error(ctxd("contexts", "show", "h@x", *at), 2).startswith("ctxd: usage: ")
    assert one_line_error(ctxd("contexts", "fork", "h@0", "n", *at), 2).startswith("ctxd: usage: ")
    assert "ALREADY_EXISTS" in one_line_error(ctxd("contexts", "fork", "h", "taken", *at))
    assert "INVALID_ARGUMENT" in one_line_error(ctxd("contexts", "fork", "h", "h", *at))
    assert "NOT_FOUND" in one_line_error(ctxd("contexts", "fork", "nobody", "n", *at))
    assert "NOT_FOUND" in one_line_error(ctxd("contexts", "history", "nobody", *at))
    assert "NOT_FOUND" in one_line_error(ctxd("contexts", "diff", "h", "nobody", *at))
    # nothing was made by the refusals
    ids = {json.loads(x)["id"] for x in ctxd("contexts", "list", "--json", *at).stdout.splitlines()}
    assert "n" not in ids
