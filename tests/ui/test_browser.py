"""``ctxd ui`` in a real browser (Chromium driven by Playwright) against a
real sidecar: what a person does with it, and what it must never do."""

from __future__ import annotations

import os
import re
from pathlib import Path

import grpc
import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.api.ctxd.v1 import context_pb2_grpc
from tests.ui import support

#: One worker runs them in a row: the browser starts once and stops before
#: that worker's other tests (see the ``browser`` fixture).
pytestmark = pytest.mark.xdist_group("ui-browser")

SHOTS = Path(__file__).resolve().parents[2] / "docs" / "operations" / "img"


def shot(watched, name: str) -> None:
    """With CTXD_UI_SCREENSHOTS=1 (scripts/ui_screenshots.sh) the docs' pictures."""
    if os.environ.get("CTXD_UI_SCREENSHOTS") == "1":
        SHOTS.mkdir(parents=True, exist_ok=True)
        watched.page.screenshot(path=str(SHOTS / f"ui-{name}.png"))


def ids_on(page) -> list[str]:
    return page.locator("#transcript > article.msg").evaluate_all(
        "els => els.map(e => e.dataset.id)"
    )


def test_the_list_filters_by_prefix_and_pages(ui, watched):
    page = watched.page
    page.goto(ui.url + "/")
    rows = page.locator("#conversations tbody tr")
    assert rows.count() == 50  # a page
    assert page.locator("#conversations").get_by_text("big:20k").count() == 1
    shot(watched, "conversations")
    page.fill("input[name=prefix]", "list:")
    page.click("button[type=submit]")
    assert "prefix=list%3A" in page.url
    first = rows.locator("td:first-child").all_inner_texts()
    assert len(first) == 50 and all(t.startswith("list:") for t in first)
    page.click("a[rel=next]")
    rest = rows.locator("td:first-child").all_inner_texts()
    assert rest == [f"list:{i:03d}" for i in range(50, 60)]
    page.goto(ui.url + "/?prefix=nothing-here")
    assert "No conversations" in page.inner_text("#conversations")


def test_a_20000_message_conversation_opens_on_its_latest_turn_and_pages_back(ui, watched):
    page = watched.page
    page.goto(ui.url + f"/c/{support.BIG}")
    assert page.locator("#transcript > article.msg").count() == 50
    last = page.locator("#transcript > article.msg").last
    assert "message 19999 of the long conversation" in last.inner_text()
    assert "messages 19,951–20,000 of 20,000" in page.inner_text("#range")
    newest = ids_on(page)
    page.click("a.older")
    older = ids_on(page)
    assert len(older) == 50
    # contiguous: the older page ends right before the newer one starts
    assert int(older[-1][1:]) + 1 == int(newest[0][1:])
    assert "messages 19,901–19,950 of 20,000" in page.inner_text("#range")
    page.click("a.first")
    texts = page.locator("#transcript > article.msg").all_inner_texts()
    assert "message 0 of the long conversation" in texts[0]
    assert page.locator("a.older").count() == 0
    page.click("a.newer")
    assert (
        "message 50 of the long conversation"
        in page.locator("#transcript > article.msg").first.inner_text()
    )


def test_a_compaction_is_a_fold_that_opens_on_the_messages_it_folded(ui, watched):
    page = watched.page
    page.goto(ui.url + "/c/demo:tools")
    fold = page.locator("details.fold").first
    summary = fold.locator("summary").inner_text()
    assert re.search(r"folded 20 messages", summary) and "tokens" in summary
    assert page.get_by_text("folded-text-0").count() == 0
    fold.locator("summary").click()
    page.wait_for_selector("details.fold .folded article.msg")
    assert fold.get_by_text("folded-text-0").count() == 1
    # the tool call is shown with its result
    call = fold.locator(".call").first
    assert "read_file" in call.inner_text() and "folded-text-0" in call.inner_text()
    shot(watched, "compaction")
    page.goto(ui.url + "/c/demo:tools/compactions")
    assert page.locator("details.fold").count() == 1


def test_a_native_item_is_shown_readably_beside_its_projection(ui, watched):
    page = watched.page
    page.goto(ui.url + "/c/demo:native")
    note = page.locator("article.msg.note")
    assert "[reasoning] thinking about the request" in note.locator("pre.text").inner_text()
    native = note.locator("details.native")
    assert "openai.responses.item" in native.locator("summary").inner_text()
    native.locator("summary").click()
    shown = native.locator("pre").inner_text()
    assert '"type": "reasoning"' in shown and '"encrypted_content": "gAAAA-opaque"' in shown


def test_the_slice_in_ctxd_and_provider_shapes(ui, watched):
    page = watched.page
    page.goto(ui.url + "/c/demo:tools/slice")
    ctxd = page.inner_text("#slice-json")
    assert '"id": "summary"' in ctxd and "answer 5" in ctxd
    page.click("text=OpenAI chat")
    openai = page.inner_text("#slice-json")
    assert '"role": "tool"' in openai and '"tool_call_id": "call5"' in openai
    page.click("text=Anthropic messages")
    assert '"type": "tool_use"' in page.inner_text("#slice-json")
    assert page.locator("#system-json").count() == 1
    shot(watched, "slice")


def test_summary_ledger_and_token_chart(ui, watched):
    page = watched.page
    page.goto(ui.url + "/c/demo:tools/summary")
    block = page.inner_text("#summary-block")
    assert "/src/a0.py" in block  # the verbatim ledger keeps paths
    page.goto(ui.url + "/c/demo:tools/tokens")
    chart = page.locator("#token-chart")
    assert chart.locator("line.mark").count() == 1
    assert chart.locator("line.window").count() == 1
    assert chart.locator("polyline.series").count() == 1
    # The prompt cache: the share read (900 of 1200), and the compaction's
    # predicted cache writes beside the 200 the next call reported.
    assert page.locator("#cache-chart rect.bar").get_attribute("width") == "300.0"
    caption = page.inner_text("#cache-caption")
    assert "75.0%" in caption and "900 of 1200" in caption and "200 written" in caption
    row = page.locator("table.grid tbody tr").first.inner_text()
    assert row.split("\t")[6] == "200", row
    shot(watched, "tokens")


def test_versions_tab_only_where_the_sidecar_keeps_versions(ui, seeded, watched):
    stub = context_pb2_grpc.ContextServiceStub(seeded.channel)
    try:
        stub.ListVersions(pb.ListVersionsRequest(context_id="demo:tools"), timeout=10)
        served = True
    except grpc.RpcError as exc:
        served = exc.code() != grpc.StatusCode.UNIMPLEMENTED
    watched.page.goto(ui.url + "/c/demo:tools")
    assert watched.page.locator("nav.tabs a", has_text="Versions").count() == int(served)


def test_memory_by_prefix_with_ttl_and_pretty_json(ui, watched):
    page = watched.page
    page.goto(ui.url + "/memory?prefix=prefs:")
    records = page.locator("details.record")
    assert records.count() == 2
    first = records.first
    assert "prefs:user7" in first.inner_text()
    assert re.search(r"\d+m \d+s|\dh \d+m", first.locator("summary").inner_text())
    assert "never expires" in records.nth(1).inner_text()
    first.locator("summary").click()
    assert '"theme": "dark"' in first.locator("pre").inner_text()
    shot(watched, "memory")


def test_hostile_text_is_shown_as_text_and_runs_nothing(ui, watched):
    page = watched.page
    page.goto(ui.url + "/c/demo:hostile")
    page.locator("details.fold summary").first.click()
    page.wait_for_selector("details.fold .folded article.msg")
    assert page.get_by_text('<script>alert("x")</script>', exact=False).count() >= 1
    page.goto(ui.url + "/memory?prefix=notes:")
    page.locator("details.record summary").first.click()
    assert "onerror" in page.inner_text("#memory")
    page.goto(ui.url + "/c/demo:hostile/slice?format=anthropic")
    assert watched.dialogs == [] and watched.errors == []
    assert page.locator("img[src=x]").count() == 0


def test_a_missing_conversation_is_a_404_page(ui, watched):
    response = watched.page.goto(ui.url + "/c/no-such-conversation")
    assert response.status == 404
    assert "No conversation 'no-such-conversation'" in watched.page.inner_text("main")


def test_no_request_leaves_the_loopback(ui, watched):
    page = watched.page
    for path in ("/", "/c/demo:tools", "/c/demo:tools/tokens", "/memory"):
        page.goto(ui.url + path)
    page.locator("details.fold summary").count()
    assert watched.requests and watched.outside() == []
    assert all(u.startswith(ui.url) or u.startswith("data:") for u in watched.requests)


def test_a_token_protected_sidecar_in_the_browser(start_sidecar, tmp_path, watched):
    sc = start_sidecar(f"lmdb://{tmp_path / 'a'}?map_size=64MiB", auth_token=support.TOKEN)
    meta = (("authorization", f"Bearer {support.TOKEN}"),)
    support.seed_demo(context_pb2_grpc.ContextServiceStub(sc.channel), metadata=meta)
    token_file = tmp_path / "token"
    token_file.write_text(support.TOKEN)
    refused = support.UiProcess("--address", sc.address)
    allowed = support.UiProcess("--address", sc.address, env={"CTXD_TOKEN_FILE": str(token_file)})
    try:
        response = watched.page.goto(refused.url + "/c/demo:tools")
        assert response.status == 502
        alert = watched.page.inner_text("[role=alert]")
        assert "The sidecar refused the token" in alert and "CTXD_TOKEN" in alert
        watched.page.goto(allowed.url + "/c/demo:tools")
        assert "answer 5" in watched.page.inner_text("#transcript")
    finally:
        refused.stop()
        allowed.stop()


def test_the_versions_tab_reads_a_conversation_as_it_was(ui, seeded, watched):
    stub = context_pb2_grpc.ContextServiceStub(seeded.channel)
    try:
        stub.ListVersions(pb.ListVersionsRequest(context_id="demo:native"), timeout=10)
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
            pytest.skip("this sidecar keeps no versions yet (ListVersions is UNIMPLEMENTED)")
        raise
    page = watched.page
    page.goto(ui.url + "/c/demo:native")
    page.click("nav.tabs >> text=Versions")
    assert page.locator("#versions tbody tr").count() >= 1
    page.locator("#versions tbody a").last.click()  # the oldest listed
    assert "As it was at v" in page.inner_text("#at-version")
    assert "plan the migration" in page.inner_text("#at-version")


def test_light_and_dark_follow_the_system(ui, watched):
    page = watched.page
    background = "getComputedStyle(document.body).backgroundColor"
    page.emulate_media(color_scheme="light")
    page.goto(ui.url + "/c/demo:tools")
    light = page.evaluate(background)
    page.emulate_media(color_scheme="dark")
    dark = page.evaluate(background)
    assert light == "rgb(255, 255, 255)" and dark != light
    shot(watched, "dark")
