"""Token estimates, model windows and calibration (pure functions)."""

from __future__ import annotations

import pytest

from ctxd_sidecar.core.contexts.model import Msg, ToolCall
from ctxd_sidecar.core.contexts.tokens import (
    MAX_RATIO,
    MIN_RATIO,
    Calibration,
    window_for_model,
)
from ctxd_sidecar.core.estimate import estimate_text


@pytest.mark.parametrize(
    "text, tokens", [("", 0), ("a", 1), ("abcd", 1), ("abcde", 2), ("é" * 8, 2), ("🙂" * 5, 2)]
)
def test_text_estimate_is_ceil_of_code_points_over_four(text, tokens):
    assert estimate_text(text) == tokens


def test_message_estimate_counts_every_text_plus_overhead():
    assert Msg("user", text="abcdefgh").tokens == 2 + 4
    calls = (ToolCall("id-not-counted", "search", '{"q":"x"}'),)
    assert Msg("assistant", text="ok", tool_calls=calls).tokens == 1 + 2 + 3 + 4
    result = Msg("tool", call_id="c", name="search", content='{"a": 1}', content_json=True)
    assert result.tokens == 2 + 4
    assert Msg("note", text="").tokens == 4


@pytest.mark.parametrize("kind", ["system", "user", "assistant", "tool", "note"])
@pytest.mark.parametrize(
    "text, content", [("", ""), ("abcde", ""), ("x", "y" * 9), ("é" * 7, "🙂")]
)
def test_the_estimate_from_lengths_is_the_message_estimate(kind, text, content):
    # A restore estimates from the stored lengths; it must agree with the message's own.
    from ctxd_sidecar.core.estimate import estimate_plain

    m = Msg(kind, text=text, content=content)
    assert estimate_plain(kind, len(text), len(content)) == m.tokens


@pytest.mark.parametrize(
    "model, window",
    [
        ("claude-3-5-sonnet-20241022", 200_000),
        ("anthropic/Claude-Opus-4", 200_000),
        ("gpt-4.1", 1_000_000),
        ("gpt-4.1-mini", 1_000_000),
        ("gemini-2.5-flash", 1_000_000),
        ("gpt-4o-mini", 128_000),
        ("gpt-5", 128_000),
        ("o1-preview", 128_000),
        ("o3", 128_000),
        ("o4-mini", 128_000),
        ("llama-3.1-70b", 128_000),
        ("", 128_000),
    ],
)
def test_window_for_model(model, window):
    assert window_for_model(model) == window


def test_unknown_model_uses_the_given_default():
    assert window_for_model("my-local-model", default=32_768) == 32_768
    assert window_for_model("foo-o1") == 128_000  # o-series only as a prefix: default


def test_calibration_smooths_clamps_and_restarts_per_model():
    cal = Calibration()
    assert cal.apply(1000) == 1000
    assert not cal.observe(5000, 10)  # too small a context to learn from
    assert cal.observe(1500, 1000, "m")
    assert cal.ratio == 1.5 and cal.apply(1000) == 1500
    assert cal.observe(1000, 1000, "m")
    assert 1.0 < cal.ratio < 1.5  # smoothed, not replaced
    cal.observe(10**9, 1000, "m")
    assert cal.ratio <= MAX_RATIO
    cal.observe(1, 1000, "other")
    assert cal.ratio == MIN_RATIO and cal.samples == 1
    assert Calibration.from_dict(cal.to_dict()) == cal
