"""A Responses ``reasoning`` item and the function calls of its response are
folded together or kept together: the Responses API refuses a
``function_call`` without its reasoning item. Over the cut rules and over
real gRPC (Compact, and the automatic trigger after a turn)."""

from __future__ import annotations

import json

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.core.compaction import Cut, plan_cut
from ctxd_sidecar.core.compaction.view import RESPONSES_ITEM, binds_next
from ctxd_sidecar.core.contexts.model import Msg
from ctxd_sidecar.core.providers.responses import NATIVE_FORMAT, from_responses
from tests.support.compaction import Watcher

RESPONSES = pb.MESSAGE_FORMAT_OPENAI_RESPONSES


def response(r: int, calls: int = 2) -> list[dict]:
    """One model response of a reasoning model's tool run: a reasoning
    item, its parallel function calls, then their outputs."""
    rs = {
        "type": "reasoning",
        "id": f"rs_{r}",
        "summary": [{"type": "summary_text", "text": f"think {r}"}],
        "encrypted_content": f"enc{r}",
    }
    fcs = [
        {
            "type": "function_call",
            "id": f"fc_{r}_{i}",
            "call_id": f"call_{r}_{i}",
            "name": "sh",
            "arguments": '{"n":1}',
        }
        for i in range(calls)
    ]
    outs = [
        {"type": "function_call_output", "call_id": f"call_{r}_{i}", "output": "x" * 300}
        for i in range(calls)
    ]
    return [rs, *fcs, *outs]


def run(rounds: int) -> list[dict]:
    return [{"role": "user", "content": "fix the build"}] + [
        item for r in range(rounds) for item in response(r, 1 + r % 2)
    ]


def check_reasoning_pairs(items: list[dict]) -> None:
    """Every function call whose response had a reasoning item comes right
    after it (or after a sibling call); no reasoning item ends the input."""
    for i, item in enumerate(items):
        if item.get("type") == "function_call":
            r = item["id"].split("_")[1]
            j = i - 1
            while j >= 0 and items[j].get("type") == "function_call":
                j -= 1
            assert j >= 0 and items[j].get("id") == f"rs_{r}", (
                f"function_call {item['id']} without its reasoning item rs_{r}: "
                f"{[x.get('id') or x.get('type') or x.get('role') for x in items]}"
            )
        if item.get("type") == "reasoning":
            assert i + 1 < len(items) and items[i + 1].get("type") == "function_call"


def messages(items: list[dict]) -> list[Msg]:
    return [m.assigned(i + 1, 0) for i, m in enumerate(from_responses(items).messages)]


def test_the_native_format_names_agree():
    assert RESPONSES_ITEM == NATIVE_FORMAT
    msgs = messages(response(0))
    assert [binds_next(m) for m in msgs] == [True, False, False, False, False]


def test_no_cut_separates_a_reasoning_item_from_its_function_calls():
    msgs = messages(run(8))
    for keep_last in range(1, len(msgs)):
        for target in (None, 60, 150, 400):
            cut = plan_cut(msgs, keep_last, target, round_cuts=True)
            if not isinstance(cut, Cut):
                continue
            assert not binds_next(msgs[cut.fold - 1]), (keep_last, target, cut.fold)
            kept = [json.loads(m.native.data) for m in msgs[cut.fold :]]
            check_reasoning_pairs(kept)
            assert not cut.opens_with_user or kept[0].get("role") == "user"


def _append(ctx, cid: str, items: list[dict], **kw) -> pb.AppendTurnResponse:
    req = pb.AppendTurnRequest(context_id=cid, format=RESPONSES, messages_json=json.dumps(items))
    for k, v in kw.items():
        setattr(req, k, v)
    return ctx.AppendTurn(req)


def _read(ctx, cid: str) -> list[dict]:
    req = pb.GetContextRequest(context_id=cid, view=pb.CONTEXT_VIEW_SLICE, format=RESPONSES)
    r = ctx.GetContext(req)
    return [i for i in json.loads(r.messages_json) if i.get("role") != "system"]


def test_compact_folds_a_reasoning_item_with_its_function_calls(start_sidecar):
    ctx = start_sidecar("memory://", contexts__auto_compact=False).contexts
    items = run(8)
    for keep_last in range(1, 16):
        cid = f"rs-{keep_last}"
        _append(ctx, cid, items)
        r = ctx.Compact(pb.CompactRequest(context_id=cid, keep_last=keep_last))
        assert r.compacted, r.reason
        check_reasoning_pairs(_read(ctx, cid))


def test_automatic_compaction_folds_a_reasoning_item_with_its_function_calls(start_sidecar):
    sc = start_sidecar("memory://", contexts__keep_last=3)
    ctx = sc.contexts
    _append(ctx, "auto", run(0), model_window=1000)
    w = Watcher(sc, "auto")
    compactions = 0
    for r in range(12):
        if _append(ctx, "auto", response(r, 1 + r % 2), model_window=1000).compaction_due:
            ev = w.next(pb.CONTEXT_EVENT_KIND_COMPACTION)
            assert ev.folded > 0
            compactions += 1
        check_reasoning_pairs(_read(ctx, "auto"))
    w.close()
    assert compactions >= 2
