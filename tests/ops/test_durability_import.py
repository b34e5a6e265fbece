"""``ctxd contexts import`` checks the whole file before it writes: a
refused file (a wrongly typed header field, a context twice, one the sidecar
already holds) is one line naming the line and the field, and creates
nothing; only contexts it created are reported."""

from __future__ import annotations

import json

import grpc
import pytest
from google.protobuf import json_format

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as cpb
from tests.ops.test_admin import ctxd, one_line_error, served  # noqa: F401 - fixture


def _append(sc, cid: str, text: str) -> None:
    sc.contexts.AppendTurn(
        cpb.AppendTurnRequest(
            context_id=cid,
            messages=[
                cpb.Message(user=cpb.UserMessage(text=text)),
                cpb.Message(assistant=cpb.AssistantMessage(text=f"re: {text}")),
            ],
        ),
        timeout=10,
    )


@pytest.fixture
def exported(served):  # noqa: F811 - the fixture imported above
    """Export lines of two contexts, "first" and "second"."""
    for cid in ("first", "second"):
        _append(served, cid, f"hello {cid}")
    out = ctxd("contexts", "export", "first", "second", "--address", served.address)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


@pytest.fixture
def target(spawn_sidecar, tmp_path):
    return spawn_sidecar("--store", f"lmdb://{tmp_path / 'target'}?map_size=64MiB").running()


def _held(sc) -> set[str]:
    listed = sc.contexts.ListContexts(cpb.ListContextsRequest(), timeout=10).contexts
    return {c.id for c in listed} - {"root"}


def _import(tmp_path, lines: list[str], target) -> object:
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return ctxd("contexts", "import", str(path), "--address", target.address)


@pytest.mark.parametrize(
    "field, value",
    [
        ("folded", "x"),
        ("folded", -1),
        ("model_window", "big"),
        ("model_window", 10**12),
        ("summary", 5),
        ("summary", {"goals": 3}),
        ("plan", [1]),
        ("id", 5),
        ("id", "no spaces allowed"),
        ("principal", 7),
        ("messages", "2"),
        ("preflight", {"ok": True}),
    ],
)
def test_a_wrongly_typed_header_field_is_named_with_its_line(
    exported, target, tmp_path, field, value
):
    lines = list(exported)
    second = next(i for i, line in enumerate(lines) if i and "ctxd_export" in line)
    header = json.loads(lines[second])
    header[field] = value
    lines[second] = json.dumps(header)
    refused = _import(tmp_path, lines, target)
    error = one_line_error(refused, 2)
    assert f"line {second + 1}" in error and repr(field) in error, error
    assert _held(target) == set()  # the valid first context was not written either


def test_a_context_twice_in_one_file_is_refused_before_any_write(exported, target, tmp_path):
    lines = exported + exported[:3]
    error = one_line_error(_import(tmp_path, lines, target), 2)
    assert f"line {len(exported) + 1}" in error and "'id'" in error and "first" in error
    assert _held(target) == set()


def test_a_file_naming_a_context_the_sidecar_holds_writes_nothing(exported, target, tmp_path):
    _append(target, "second", "already here")
    error = one_line_error(_import(tmp_path, exported, target), 1)
    assert "FAILED_PRECONDITION" in error and "second" in error
    assert _held(target) == {"second"}
    with pytest.raises(grpc.RpcError) as err:
        target.contexts.GetContext(cpb.GetContextRequest(context_id="first"), timeout=10)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_a_context_without_messages_is_created_and_reported(exported, target, tmp_path):
    empty = {**json.loads(exported[0]), "id": "empty", "messages": 0, "folded": 0}
    empty["summary"], empty["plan"], empty["preflight"] = {}, None, ""
    done = _import(tmp_path, [json.dumps(empty), *exported], target)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "imported empty: 0 messages",
        "imported first: 2 messages",
        "imported second: 2 messages",
    ]
    assert _held(target) == {"empty", "first", "second"}


def test_what_an_interrupted_import_left_is_imported_again(exported, target, tmp_path):
    """A context holding a prefix of the file's own messages (ids, times,
    contents) is what a killed import leaves: the next run replaces it."""
    first_message = cpb.Message()
    json_format.Parse(exported[1], first_message)
    target.contexts.AppendTurn(
        cpb.AppendTurnRequest(context_id="first", messages=[first_message]), timeout=10
    )
    done = _import(tmp_path, exported, target)
    assert done.returncode == 0, done.stderr
    again = ctxd("contexts", "export", "first", "second", "--address", target.address)
    assert again.stdout.splitlines()[1:3] == exported[1:3]
    assert [json.loads(x) for x in again.stdout.splitlines() if "ctxd_export" not in x] == [
        json.loads(x) for x in exported if "ctxd_export" not in x
    ]
