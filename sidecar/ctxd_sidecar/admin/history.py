"""The history verbs of ``ctxd contexts``: ``history ID`` (the kept versions),
``fork SRC[@V] NEW`` and ``diff A[@V] B[@V]`` (where two histories part and
what each side adds); ``show ID@V`` reads through :func:`split_ref`."""

from __future__ import annotations

import uuid

from ctxd_sidecar.admin import render, transfer
from ctxd_sidecar.admin.client import Client
from ctxd_sidecar.admin.connect import AdminError
from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb

HISTORY_HEADERS = ["VERSION", "KIND", "TIME", "MESSAGES", "TOKENS"]


def register(cs, common) -> None:
    """Add ``history``, ``fork`` and ``diff`` to ``ctxd contexts``."""
    hi = cs.add_parser("history", help="a context's kept versions, newest first")
    hi.add_argument("id")
    common(hi)
    fo = cs.add_parser("fork", help="a new conversation holding SRC as of version V")
    fo.add_argument("source", metavar="SRC[@V]", help="the source; @V: as of version V")
    fo.add_argument("new", metavar="NEW", help="the new conversation's id")
    common(fo)
    di = cs.add_parser("diff", help="where two contexts' histories part and what each adds")
    di.add_argument("a", metavar="A[@V]")
    di.add_argument("b", metavar="B[@V]")
    common(di)


def split_ref(ref: str) -> tuple[str, int]:
    """``ID@V`` -> (ID, V); a plain ``ID`` -> (ID, 0), the latest version."""
    if "@" not in ref:
        return ref, 0
    context_id, _, version = ref.rpartition("@")
    if not context_id or not version.isdigit() or int(version) < 1:
        raise AdminError(
            f"usage: {ref!r} is not ID@VERSION with VERSION a number from 1 "
            "(`ctxd contexts history ID` lists the versions kept)",
            2,
        )
    return context_id, int(version)


def _label(context_id: str, version: int) -> str:
    return f"{context_id}@{version}"


def _history(client: Client, args) -> int:
    versions, oldest = client.list_versions(args.id)
    if args.json:
        render.emit_json(
            {
                "context_id": args.id,
                "oldest_kept": oldest,
                "versions": [render.as_dict(v) for v in versions],
            }
        )
        return 0
    rows = [
        [v.version, v.kind, render.when(v.created_ms), v.message_count, v.est_tokens]
        for v in versions
    ]
    render.table(HISTORY_HEADERS, rows)
    print(f"\n{len(versions)} versions kept; the oldest readable is {oldest}")
    return 0


def _fork(client: Client, args) -> int:
    source, at = split_ref(args.source)
    info = client.fork(source, args.new, at_version=at, idempotency_key=uuid.uuid4().hex)
    if args.json:
        render.emit_json(render.as_dict(info))
    else:
        print(
            f"forked {_label(info.forked_from, info.forked_at_version)} "
            f"-> {info.id} (version {info.version})"
        )
    return 0


def _parting(a: list[pb.Message], b: list[pb.Message]) -> int:
    """How many leading messages the two sides share (same id, same content)."""
    common = 0
    for x, y in zip(a, b, strict=False):
        if x.SerializeToString(deterministic=True) != y.SerializeToString(deterministic=True):
            break
        common += 1
    return common


def _diff(client: Client, args) -> int:
    sides = []
    for ref in (args.a, args.b):
        context_id, at = split_ref(ref)
        ctx, messages = transfer.read_full(client, context_id, at_version=at)
        sides.append((_label(ctx.id, ctx.version), messages))
    (a_name, a_msgs), (b_name, b_msgs) = sides
    common = _parting(a_msgs, b_msgs)
    if args.json:
        render.emit_json(
            {
                "a": a_name,
                "b": b_name,
                "common": common,
                "a_adds": [render.as_dict(m) for m in a_msgs[common:]],
                "b_adds": [render.as_dict(m) for m in b_msgs[common:]],
            }
        )
        return 0
    after = f"after message {a_msgs[common - 1].id}" if common else "from the first message"
    print(f"{a_name} and {b_name} share {common} messages and part {after}")
    for name, extra in ((a_name, a_msgs[common:]), (b_name, b_msgs[common:])):
        print(f"\n{name} adds {len(extra)} messages")
        if extra:
            render.table(
                ["ID", "TIME", "KIND", "TEXT"],
                [[m.id, render.when(m.ts_ms), *render.brief(m)] for m in extra],
            )
    return 0


HANDLERS = {"contexts_history": _history, "contexts_fork": _fork, "contexts_diff": _diff}
