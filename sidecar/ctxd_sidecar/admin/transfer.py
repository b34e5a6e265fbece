"""Export and import contexts as JSON lines that round-trip exactly.

A context is a header line followed by one line per live message::

    {"ctxd_export": 1, "id": ..., "kind": ..., "version": ..., "summary": {...},
     "plan": {...}, "skills": [...], "preflight": "...", "principal": ...,
     "task": ..., "model": ..., "model_window": ..., "folded": K, "messages": N}
    {"id": "m7", "ts_ms": "...", "user": {"text": "..."}}   # ctxd.v1.Message
    ...

Several contexts may follow each other in one file. Message lines are
``json_format.MessageToDict`` with proto field names, so ids and timestamps
are kept.

Import rebuilds the context through the public API only:

* ``folded`` (messages compaction already folded, so ids start at
  ``m{K+1}``) placeholder notes are appended first, then the messages in
  turns, keeping their timestamps;
* when there was a summary (or anything folded) a compaction planned to
  fold exactly the placeholders is applied with the summary as the answer,
  as soon as enough messages follow them for a valid cut (a user message or
  a whole tool round), so the summary is restored and the messages get
  their original ids;
* the plan is re-created (ids, titles, details) and each item's status,
  note and binding set; the preflight verdict is set.

The whole file is checked before anything is written. An import that fails
part-way deletes what it created, so it can be run again once the cause is
fixed; one killed part-way leaves a context holding a prefix of the file,
which the next run recognises, deletes and imports again.

The compaction archive travels too: when every folded message is still
stored (each compaction record expandable, together ``m1..mK``), the header's
``archive`` holds them as ExpandCompaction returned them (verified against
each record's hash; a mismatch stops the export with DATA_LOSS). Import then
appends them instead of the placeholders, and its one compaction folds
exactly them: ExpandCompaction on the imported context returns the same
messages, byte for byte, under one record (its own hash), and the ledger is
rebuilt from them. Otherwise placeholders stand in, as before.

Not restored: the version and timestamps of the record itself, the
summary's verbatim ledger when there is no archive (not part of the API),
loaded skills (named in the header; load them again with LoadSkill) and the
split of the folded messages between several compactions.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator
from typing import IO

from google.protobuf import json_format

from ctxd_sidecar.admin import import_check
from ctxd_sidecar.admin.client import Client
from ctxd_sidecar.admin.connect import AdminError
from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb

FORMAT = 1
#: Messages per AppendTurn on import (the server's default cap is 256).
TURN = 200
PLACEHOLDER = "folded before export"
_PLACEHOLDER_MSG = pb.Message(note=pb.NoteMessage(text=PLACEHOLDER))
MAX_MODEL_WINDOW = import_check.MAX_MODEL_WINDOW


def _dict(msg) -> dict:
    return json_format.MessageToDict(msg, preserving_proto_field_name=True)


def read_full(
    client: Client, context_id: str, at_version: int = 0
) -> tuple[pb.Context, list[pb.Message]]:
    """Every page of the FULL view (as of ``at_version`` when given); starts
    over when a compaction or plan change invalidates the page token (ABORTED)."""
    for _attempt in range(5):
        messages: list[pb.Message] = []
        token = ""
        last = None
        try:
            while True:
                resp = client.get_context(context_id, page_token=token, at_version=at_version)
                last = resp.context
                messages.extend(resp.context.messages)
                token = resp.next_page_token
                if not token:
                    return last, messages
        except AdminError as exc:
            if not exc.message.startswith("ABORTED"):
                raise
    raise AdminError(f"ABORTED: context {context_id} kept changing while it was exported")


def _seq(message_id: str) -> int:
    try:
        return int(message_id[1:]) if message_id.startswith("m") else 0
    except ValueError:
        return 0


def read_archive(client: Client, ctx: pb.Context, folded: int) -> list[pb.Message]:
    """Every folded message ``m1..m{folded}`` as ExpandCompaction returns them,
    or [] when some are no longer stored (their records dropped or expired)."""
    if folded <= 0 or not all(r.expandable for r in ctx.compactions):
        return []
    out: list[pb.Message] = []
    for rec in ctx.compactions:
        out.extend(client.expand_compaction(ctx.id, rec.id))
    return out if [m.id for m in out] == [f"m{i}" for i in range(1, folded + 1)] else []


def _folded(ctx: pb.Context, messages: list[pb.Message]) -> int:
    return max(_seq(messages[0].id) - 1 if messages else ctx.summary.covers_messages, 0)


def export_lines(
    ctx: pb.Context, messages: list[pb.Message], archive: list[pb.Message] = ()
) -> Iterator[str]:
    folded = _folded(ctx, messages)
    header = {
        "ctxd_export": FORMAT,
        "id": ctx.id,
        "kind": pb.ContextKind.Name(ctx.kind),
        "version": ctx.version,
        "summary": _dict(ctx.summary),
        "plan": _dict(ctx.plan) if ctx.HasField("plan") else None,
        "skills": [_dict(s) for s in ctx.skills],
        "preflight": ctx.preflight_json,
        "principal": ctx.principal,
        "task": ctx.task,
        "model": ctx.model,
        "model_window": ctx.model_window,
        "folded": folded,
        "messages": len(messages),
    }
    if archive:
        header["archive"] = [_dict(m) for m in archive]
    yield json.dumps(header, ensure_ascii=False, sort_keys=True)
    for m in messages:
        yield json.dumps(_dict(m), ensure_ascii=False, sort_keys=True)


def parse(lines: Iterable[str]) -> Iterator[tuple[dict, list[pb.Message]]]:
    """(header, messages) per exported context; AdminError(code 2) on bad
    input, naming the line and the field (:mod:`ctxd_sidecar.admin.import_check`)."""
    header: dict | None = None
    at = 0  # the header's line
    seen: dict[str, int] = {}
    messages: list[pb.Message] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise AdminError(f"line {n}: not JSON ({exc.msg})", 2) from None
        if isinstance(obj, dict) and "ctxd_export" in obj:
            if header is not None:
                yield _checked(at, header, messages)
            if obj["ctxd_export"] != FORMAT:
                raise AdminError(f"line {n}: unknown export format {obj['ctxd_export']!r}", 2)
            import_check.header(n, obj)
            import_check.archive(n, obj)
            if obj["id"] in seen:
                raise AdminError(
                    f"line {n}: field 'id': context {obj['id']} is already in the file "
                    f"(line {seen[obj['id']]})",
                    2,
                )
            seen[obj["id"]] = n
            header, messages, at = obj, [], n
            continue
        if header is None:
            raise AdminError(f"line {n}: a message before any context header", 2)
        try:
            messages.append(json_format.ParseDict(obj, pb.Message()))
        except (json_format.ParseError, TypeError, ValueError) as exc:
            raise AdminError(f"line {n}: not a ctxd message ({exc})", 2) from None
    if header is None:
        raise AdminError("no context in the input", 2)
    yield _checked(at, header, messages)


def _checked(at: int, header: dict, messages: list[pb.Message]) -> tuple[dict, list[pb.Message]]:
    if header.get("messages", len(messages)) != len(messages):
        raise AdminError(
            f"line {at}: field 'messages': context {header.get('id')}: header says "
            f"{header['messages']} messages, found {len(messages)} (truncated file?)",
            2,
        )
    return header, messages


def _has_summary(summary: pb.Summary) -> bool:
    return bool(
        summary.goals or summary.decisions or summary.open or summary.facts or summary.narrative
    )


#: Header fields an import restores: a context whose export matches the file
#: on these (and on every message) was imported from it already.
RESTORED = ("summary", "plan", "preflight", "principal", "task", "model", "model_window")


def check_absent(
    client: Client, contexts: list[tuple[dict, list[pb.Message]]]
) -> tuple[list[str], list[str]]:
    """Before anything is written: (ids to import again, ids already
    imported). A context the sidecar holds is refused (AdminError) unless it
    holds what importing this same context writes: all of it (imported
    before: skipped), or a prefix (an import killed half-way: deleted and
    imported again)."""
    again, done = [], []
    for header, messages in contexts:
        cid = header["id"]
        existing = client.info(cid)
        if existing is None or not existing.message_count:
            continue
        left = left_by_import(client, cid, header, messages)
        if left is None:
            raise AdminError(
                f"FAILED_PRECONDITION: context {cid} already exists with "
                f"{existing.message_count} messages; delete it first (nothing was imported)"
            )
        (done if left else again).append(cid)
    return again, done


def left_by_import(
    client: Client, cid: str, header: dict, messages: list[pb.Message]
) -> bool | None:
    """True if ``cid`` holds this context as importing it writes, False if
    a prefix of that (the placeholders of its folded messages, then some of
    its messages: ids, times, contents; what a killed import leaves), None
    if anything else."""
    try:
        ctx, held = read_full(client, cid)
    except AdminError:
        return None
    folded = int(header.get("folded") or 0)
    ours = {m.id: m for m in messages}
    archived = {m.id: m for m in import_check.archive(0, header)}
    for m in held:
        if _seq(m.id) <= folded:
            if archived:
                if archived.get(m.id) != m:
                    return None
            elif not (m.HasField("note") and m.note.text == PLACEHOLDER):
                return None
        elif ours.get(m.id) != m:
            return None
    if [m.id for m in held] != [m.id for m in messages]:
        return False
    now = json.loads(next(export_lines(ctx, held, read_archive(client, ctx, _folded(ctx, held)))))
    return all(_restored(now.get(k)) == _restored(header.get(k)) for k in RESTORED)


def _restored(value):
    """A header field as an import restores it (not the time it was written)."""
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if k != "updated_ms"} or None
    return value or None


def import_context(client: Client, header: dict, messages: list[pb.Message]) -> dict:
    """Rebuild one context in a sidecar that does not hold it yet; one that
    fails half-way is deleted again, so the import can simply be retried."""
    cid = header.get("id") or ""
    existing = client.info(cid)
    if existing is not None and existing.message_count:
        raise AdminError(
            f"FAILED_PRECONDITION: context {cid} already exists with "
            f"{existing.message_count} messages; delete it first"
        )
    try:
        return _rebuild(client, cid, header, messages)
    except AdminError as exc:
        with contextlib.suppress(AdminError):
            client.delete(cid)
        if not header.get("archive"):
            raise
        # The folded messages would not go in as they are (a sidecar that
        # refuses them): placeholders stand in for them, as without an archive.
        plain = {k: v for k, v in header.items() if k != "archive"}
        out = import_context(client, plain, messages)
        return {**out, "archive": f"not restored ({exc.message})"}
    except BaseException:
        with contextlib.suppress(AdminError):
            client.delete(cid)
        raise


def _rebuild(client: Client, cid: str, header: dict, messages: list[pb.Message]) -> dict:
    summary = json_format.ParseDict(header.get("summary") or {}, pb.Summary())
    folded = int(header.get("folded") or 0)
    if _has_summary(summary) and not folded:
        folded = 1  # something to fold the summary onto
    attrs = {
        "principal": header.get("principal") or "",
        "task": header.get("task") or "",
        "model": header.get("model") or "",
        "model_window": int(header.get("model_window") or 0),
    }
    # Until the last turn the window is the largest allowed, so the target's
    # automatic compaction does not fold half-imported history.
    roomy = {"model_window": MAX_MODEL_WINDOW}
    turns = 0

    def append(batch: list[pb.Message], last: bool) -> None:
        nonlocal turns
        client.append(cid, batch, idempotency_key=f"import-{turns}", **(attrs if last else roomy))
        turns += 1

    rest = list(messages)
    if not rest and not folded:
        # Created empty (CreateContext): no turn to append, so create it as such.
        client.create(cid, **attrs)
    if folded:
        archive = import_check.archive(0, header) or [_PLACEHOLDER_MSG] * folded
        for start in range(0, folded, TURN):
            append(archive[start : start + TURN], False)
        # Live messages one at a time until the placeholders can be folded:
        # the kept side must open at a user message or a whole tool round,
        # as it did where the export came from.
        kept = 0
        while True:
            if rest:
                kept += 1
                append(rest[:1], len(rest) == 1)
                rest = rest[1:]
            plan = client.plan_compaction(cid, keep_last=max(kept, 1))
            if not plan.nothing_to_do and plan.fold_through_message_id == f"m{folded}":
                _restore_summary(client, cid, summary, plan)
                break
            if not rest:
                raise AdminError(
                    f"FAILED_PRECONDITION: context {cid}: cannot fold the {folded} "
                    f"placeholder(s) to restore the summary "
                    f"({plan.reason or 'the cut lands elsewhere'})"
                )
    for start in range(0, len(rest), TURN):
        append(rest[start : start + TURN], start + TURN >= len(rest))
    if header.get("plan"):
        _restore_plan(client, cid, json_format.ParseDict(header["plan"], pb.Plan()))
    if header.get("preflight"):
        client.set_preflight(cid, header["preflight"])
    return {"id": cid, "messages": len(messages), "folded": folded}


def _restore_summary(client: Client, cid: str, summary: pb.Summary, plan) -> None:
    answer = {
        "goals": list(summary.goals),
        "decisions": list(summary.decisions),
        "open": list(summary.open),
        "facts": list(summary.facts),
        "narrative": summary.narrative,
    }
    if not any(answer.values()):
        # ctxd never writes an empty summary; one from before that rule (only
        # its ledger, which the folded placeholders cannot carry) says so.
        answer["narrative"] = "Earlier messages were folded; their summary kept no text."
    client.apply_compaction(cid, plan.plan_ref, json.dumps(answer, ensure_ascii=False))


def _restore_plan(client: Client, cid: str, plan: pb.Plan) -> None:
    specs = [pb.PlanItemSpec(id=i.id, title=i.title, detail=i.detail) for i in plan.items]
    client.update_plan(cid, create=pb.PlanCreate(goal=plan.goal, items=specs))
    finished = {pb.PLAN_ITEM_STATUS_DONE, pb.PLAN_ITEM_STATUS_SKIPPED}
    # Finished items first: a binding is unique among open items only.
    ordered = sorted(plan.items, key=lambda i: i.status not in finished)
    for item in ordered:
        update = pb.PlanUpdate(item_id=item.id, status=item.status or pb.PLAN_ITEM_STATUS_PENDING)
        if item.note:
            update.note = item.note
        if item.HasField("bound") and item.bound.id:
            update.bind.CopyFrom(item.bound)
        client.update_plan(cid, update=update)


def write_export(client: Client, ids: list[str], out: IO[str]) -> int:
    count = 0
    for cid in ids:
        ctx, messages = read_full(client, cid)
        archive = read_archive(client, ctx, _folded(ctx, messages))
        for line in export_lines(ctx, messages, archive):
            out.write(line + "\n")
        count += 1
    out.flush()
    return count
