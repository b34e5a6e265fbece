"""The admin subcommands: parsers and what each one does.

Every verb prints a readable table by default and JSON with ``--json`` (one
document, or JSON lines for streams). A failed call is one line on stderr,
``ctxd: STATUS: message``, and exit 1; usage errors exit 2.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys

from ctxd_sidecar.admin import history, render, transfer
from ctxd_sidecar.admin.client import Client
from ctxd_sidecar.admin.connect import AdminError, add_connection_flags, target
from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb

VERBS = ("health", "contexts", "memory", "watch")
#: Health services a sidecar serves ('' is the process itself).
KNOWN_SERVICES = ("''", "ctxd.v1.ContextService", "ctxd.v1.MemoryService")
#: Messages `contexts show` prints when --tail is not given.
DEFAULT_TAIL = 20
#: Summary list items `contexts show` prints per field.
SUMMARY_ITEMS = 5


def _common(p: argparse.ArgumentParser, *, json_flag: bool = True) -> None:
    if json_flag:
        p.add_argument("--json", action="store_true", help="JSON for scripts")
    add_connection_flags(p)


def _verb(sub, name: str, help: str, *positionals: str) -> None:
    """A verb taking ``positionals`` (plain names) and the common flags."""
    p = sub.add_parser(name, help=help)
    for positional in positionals:
        p.add_argument(positional)
    _common(p)


def register(sub) -> None:
    """Add the admin verbs to ``ctxd``'s subparsers."""
    h = sub.add_parser("health", help="exit 0 when the sidecar is SERVING, 1 otherwise")
    h.add_argument("--service", default="", help="health service name ('' = the process)")
    _common(h)
    _register_contexts(sub)
    _register_memory(sub)
    _verb(sub, "watch", "print a context's events until Ctrl-C", "context")


def _register_contexts(sub) -> None:
    c = sub.add_parser(
        "contexts", help="list, show, export, import, compact, delete, fork or diff contexts"
    )
    cs = c.add_subparsers(dest="action", required=True)
    ls = cs.add_parser("list", help="every context, in id order")
    ls.add_argument("--archived", action="store_true", help="include archived conversations")
    _common(ls)
    show = cs.add_parser("show", help="one context: record, summary, plan, last messages")
    show.add_argument("id", metavar="ID[@V]", help="@V: the context as of version V")
    show.add_argument(
        "--tail",
        type=int,
        default=None,
        help="last messages to show (default 20; with --json every message unless given)",
    )
    _common(show)
    ex = cs.add_parser("export", help="contexts as JSON lines (header, then messages)")
    ex.add_argument("ids", nargs="+", metavar="ID")
    ex.add_argument("-o", "--output", help="file to write (default stdout)")
    _common(ex, json_flag=False)
    _verb(cs, "import", "recreate exported contexts ('-' reads stdin)", "file")
    cp = cs.add_parser("compact", help="compact now with the sidecar's summariser")
    cp.add_argument("id")
    cp.add_argument("--keep-last", type=int, default=0, help="messages kept verbatim")
    cp.add_argument("--summariser", default="", help="summariser plugin (default configured)")
    _common(cp)
    _verb(cs, "compactions", "compaction records: tokens, fidelity, dropped", "id")
    _verb(cs, "delete", "delete a conversation and everything stored for it", "id")
    history.register(cs, _common)


def _register_memory(sub) -> None:
    m = sub.add_parser("memory", help="get, set, delete or list agent memory")
    ms = m.add_subparsers(dest="action", required=True)
    _verb(ms, "get", "one record", "key")
    s = ms.add_parser("set", help="write a JSON value")
    s.add_argument("key")
    s.add_argument("value", metavar="JSON")
    s.add_argument("--ttl", type=int, default=0, help="seconds to live (0: forever)")
    _common(s)
    _verb(ms, "delete", "remove a key", "key")
    li = ms.add_parser("list", help="keys in order, optionally under a prefix")
    li.add_argument("prefix", nargs="?", default="")
    li.add_argument("--values", action="store_true", help="show values too")
    _common(li)


def run(args: argparse.Namespace) -> int:
    """Execute one admin verb; errors are one line on stderr."""
    name = args.command if args.command in {"health", "watch"} else f"{args.command}_{args.action}"
    try:
        with Client(target(args)) as client:
            return HANDLERS[name](client, args)
    except AdminError as exc:
        print(f"ctxd: {exc.message}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


# -- health -----------------------------------------------------------------------------
def _health(client: Client, args) -> int:
    try:
        status = client.health(args.service)
    except AdminError as exc:
        if exc.message.startswith("NOT_FOUND"):
            # The sidecar answered: it serves no health service by that name.
            status = "SERVICE_UNKNOWN"
            detail = f"no health service named {args.service!r}; known: {', '.join(KNOWN_SERVICES)}"
        else:
            status, detail = "UNREACHABLE", exc.message
    else:
        detail = ""
    if args.json:
        render.emit_json({"address": client.target.address, "status": status, "detail": detail})
    else:
        print(f"{status} {client.target.address}" + (f" ({detail})" if detail else ""))
    return 0 if status == "SERVING" else 1


# -- contexts ---------------------------------------------------------------------------
def _kind(kind: int) -> str:
    return render.enum_name(pb.ContextKind.Name(kind), "CONTEXT_KIND_")


def _contexts_list(client: Client, args) -> int:
    infos = list(client.list_contexts(include_archived=args.archived))
    if args.json:
        for info in infos:
            render.emit_json(render.as_dict(info))
        return 0
    render.table(
        ["ID", "KIND", "VERSION", "TURNS", "MESSAGES", "TOKENS", "WINDOW", "UPDATED"],
        [
            [
                i.id + (" (archived)" if i.archived else ""),
                _kind(i.kind),
                i.version,
                i.turns,
                i.message_count,
                i.est_tokens,
                i.model_window,
                render.when(i.updated_ms),
            ]
            for i in infos
        ],
    )
    return 0


def _contexts_show(client: Client, args) -> int:
    ctx, messages = transfer.read_full(client, *history.split_ref(args.id))
    if args.json:
        full = pb.Context()
        full.CopyFrom(ctx)
        del full.messages[:]
        if args.tail is None:
            full.messages.extend(messages)
        elif args.tail > 0:
            full.messages.extend(messages[-args.tail :])
        render.emit_json(render.as_dict(full))
        return 0
    rows = [
        ("id", ctx.id),
        ("kind", _kind(ctx.kind)),
        ("version", ctx.version),
        ("turns", ctx.turns),
        ("messages", len(messages)),
        ("tokens", f"{ctx.est_tokens} of {ctx.model_window}"),
        ("model", ctx.model or "-"),
        ("principal", ctx.principal or "-"),
        ("task", ctx.task or "-"),
        ("created", render.when(ctx.created_ms)),
        ("updated", render.when(ctx.updated_ms)),
        ("skills", ", ".join(s.name for s in ctx.skills) or "-"),
        *_compaction_rows(ctx),
        ("preflight", render.short(ctx.preflight_json) or "-"),
    ]
    render.table(["FIELD", "VALUE"], rows)
    s = ctx.summary
    if s.covers_messages or s.narrative or s.goals or s.facts:
        print(f"\nsummary (covers {s.covers_messages} messages)")
        for name in ("goals", "decisions", "open", "facts"):
            items = getattr(s, name)
            for item in items[:SUMMARY_ITEMS]:
                print(f"  {name}: {render.short(item, 90)}")
            if len(items) > SUMMARY_ITEMS:
                print(f"  {name}: (+{len(items) - SUMMARY_ITEMS} more; --json shows all)")
        if s.narrative:
            print(f"  narrative: {render.short(s.narrative, 90)}")
    if ctx.HasField("plan"):
        print(f"\nplan: {ctx.plan.goal}")
        render.table(
            ["  ITEM", "STATUS", "TITLE", "NOTE"],
            [
                [
                    f"  {i.id}",
                    render.enum_name(pb.PlanItemStatus.Name(i.status), "PLAN_ITEM_STATUS_"),
                    render.short(i.title, 40),
                    render.short(i.note, 30),
                ]
                for i in ctx.plan.items
            ],
        )
    count = DEFAULT_TAIL if args.tail is None else args.tail
    tail = messages[-count:] if count > 0 else []
    if tail:
        print(f"\nlast {len(tail)} of {len(messages)} messages")
        render.table(
            ["ID", "TIME", "KIND", "TEXT"],
            [[m.id, render.when(m.ts_ms), *render.brief(m)] for m in tail],
        )
    return 0


def _contexts_export(client: Client, args) -> int:
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            transfer.write_export(client, args.ids, out)
    else:
        transfer.write_export(client, args.ids, sys.stdout)
    return 0


def _contexts_import(client: Client, args) -> int:
    try:
        fh = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8")  # noqa: SIM115
    except OSError as exc:
        raise AdminError(f"cannot read {args.file}: {exc.strerror}", 2) from None
    with fh:
        contexts = list(transfer.parse(fh))  # the whole file is checked before any write
    again, imported = transfer.check_absent(client, contexts)
    for cid in again:
        client.delete(cid)  # what an interrupted import of this file left
    for header, messages in contexts:
        if header["id"] in imported:
            print(f"ctxd: skipped {header['id']}: imported from this file before", file=sys.stderr)
            continue
        done = transfer.import_context(client, header, messages)
        if args.json:
            render.emit_json(done)
        else:
            print(f"imported {done['id']}: {done['messages']} messages")
        if "archive" in done:
            print(f"ctxd: {done['id']}: folded messages {done['archive']}", file=sys.stderr)
    return 0


def _contexts_compact(client: Client, args) -> int:
    resp = client.compact(args.id, keep_last=args.keep_last, summariser=args.summariser)
    if args.json:
        render.emit_json(render.as_dict(resp))
    elif resp.compacted:
        print(
            f"compacted {args.id}: folded {resp.folded} messages, "
            f"{resp.tokens_before} -> {resp.tokens_after} tokens, v{resp.version} "
            f"({resp.summariser})"
        )
    else:
        print(f"nothing to compact in {args.id}: {resp.reason}")
    return 0


def _fidelity(f) -> str:
    return f"{f.carried}/{f.artifacts} ({f.score:.1%})"


def _contexts_compactions(client: Client, args) -> int:
    records = list(client.get_context(args.id).context.compactions)
    if args.json:
        for r in records:
            render.emit_json(render.as_dict(r))
        return 0
    rows = []
    for r in records:
        f = r.fidelity if r.HasField("fidelity") else None
        rows.append(
            [
                r.id,
                f"{r.first_message_id}..{r.last_message_id}",
                r.folded,
                f"{r.tokens_before} -> {r.tokens_after}",
                _fidelity(f) if f else "-",
                f"{f.carried_since_start:.1%}" if f else "-",
                _cache_cost(r.cache_cost),
                r.summariser,
                render.when(r.ts_ms),
            ]
        )
    headers = ["ID", "MESSAGES", "FOLDED", "TOKENS", "FIDELITY", "SINCE START"]
    headers += ["CACHE WRITES", "BY", "WHEN"]
    render.table(headers, rows)
    for r in records:
        if r.fidelity.dropped:
            shown = ", ".join(f"{d.kind} {render.short(d.text, 50)}" for d in r.fidelity.dropped)
            more = r.fidelity.artifacts - r.fidelity.carried - len(r.fidelity.dropped)
            print(f"{r.id} dropped: {shown}" + (f" (+{more} more)" if more > 0 else ""))
    return 0


def _compaction_rows(ctx: pb.Context) -> list[tuple[str, object]]:
    """Compactions and the provider's prompt cache (RecordUsage)."""
    u = ctx.cache_usage
    cache = (
        f"{u.cache_read_share:.1%} read ({u.cached_input_tokens} of {u.input_tokens} input "
        f"tokens, {u.cache_write_tokens} written, {u.reports} reports)"
    )
    return [
        ("compactions", len(ctx.compactions)),
        ("prompt cache", cache if ctx.HasField("cache_usage") else "-"),
    ]


def _cache_cost(c: pb.CompactionCacheCost) -> str:
    """Reported against predicted cache writes ("-" until a usage report)."""
    return f"{c.cache_write_tokens if c.reported else '-'} of {c.predicted_write_tokens} pred."


def _contexts_delete(client: Client, args) -> int:
    return _deleted(args, "id", "context", client.delete(args.id))


def _deleted(args, field: str, what: str, deleted: bool) -> int:
    """A delete verb's outcome for the ``what`` named by ``args.<field>``."""
    name = getattr(args, field)
    if args.json:
        render.emit_json({field: name, "deleted": deleted})
    else:
        print(f"deleted {name}" if deleted else f"no {what} {name}")
    return 0


# -- memory -----------------------------------------------------------------------------
def _record_row(r, values: bool) -> list:
    row = [r.key, r.version, render.when(r.updated_ms), render.when(r.expires_at_ms), r.by or "-"]
    return [*row, render.short(r.value_json, 60)] if values else row


MEMORY_HEADERS = ["KEY", "VERSION", "UPDATED", "EXPIRES", "BY"]


def _memory_get(client: Client, args) -> int:
    r = client.memory_get(args.key)
    if args.json:
        render.emit_json(render.as_dict(r))
    else:
        print(r.value_json)
    return 0


def _memory_set(client: Client, args) -> int:
    try:
        json.loads(args.value)
    except json.JSONDecodeError as exc:
        raise AdminError(
            f"the value is not JSON ({exc.msg}); quote strings: '\"text\"'", 2
        ) from None
    r = client.memory_set(args.key, args.value, args.ttl)
    if args.json:
        render.emit_json(render.as_dict(r))
    else:
        render.table(MEMORY_HEADERS, [_record_row(r, False)])
    return 0


def _memory_delete(client: Client, args) -> int:
    return _deleted(args, "key", "key", client.memory_delete(args.key))


def _memory_list(client: Client, args) -> int:
    records = client.memory_list(args.prefix, values=args.values)
    if args.json:
        for r in records:
            render.emit_json(render.as_dict(r))
        return 0
    headers = MEMORY_HEADERS + (["VALUE"] if args.values else [])
    render.table(headers, [_record_row(r, args.values) for r in records])
    return 0


# -- watch ------------------------------------------------------------------------------
def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _watch(client: Client, args) -> int:
    """Until the stream ends or Ctrl-C/SIGTERM, which is a normal end (exit 0)."""
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        _print_events(client, args)
    except KeyboardInterrupt:
        pass
    return 0


def _print_events(client: Client, args) -> None:
    for ev in client.watch(args.context):
        if args.json:
            render.emit_json(render.as_dict(ev))
            continue
        kind = render.enum_name(pb.ContextEventKind.Name(ev.kind), "CONTEXT_EVENT_KIND_")
        extra = ""
        if ev.kind == pb.CONTEXT_EVENT_KIND_COMPACTION:
            extra = f" folded {ev.folded}, {ev.tokens_before} -> {ev.tokens_after} tokens"
        if ev.detail:
            extra += f" {ev.detail}"
        print(f"{render.when(ev.ts_ms)} {ev.context_id} v{ev.version} {kind}{extra}", flush=True)


HANDLERS = {
    "health": _health,
    "watch": _watch,
    "contexts_list": _contexts_list,
    "contexts_show": _contexts_show,
    "contexts_export": _contexts_export,
    "contexts_import": _contexts_import,
    "contexts_compact": _contexts_compact,
    "contexts_compactions": _contexts_compactions,
    "contexts_delete": _contexts_delete,
    "memory_get": _memory_get,
    "memory_set": _memory_set,
    "memory_delete": _memory_delete,
    "memory_list": _memory_list,
    **history.HANDLERS,
}
