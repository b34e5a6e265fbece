"""Numeric settings: finite, and never negative.

No setting gives ``inf``, ``nan`` or a negative number a meaning; accepted,
they reached the domain as a crash at start-up (``int(inf)``) or as invalid
JSON in a log line (``"grace_seconds": NaN``). The schema walks below cover
every numeric setting, plugin tables included, so a new one cannot slip by.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ctxd_sidecar.config import MAX_SECONDS, ConfigError, problems
from ctxd_sidecar.config import loader as config_loader
from ctxd_sidecar.config.loader import load_config
from ctxd_sidecar.plugin.manager import plugin_manager


def _numeric_settings(kind: type) -> list[str]:
    """Dotted names of every ``kind`` setting, core and plugin tables."""
    cls = config_loader.settings_class(config_loader.plugin_tables(plugin_manager(), []))
    names = []
    for path in config_loader.leaf_paths(cls):
        info = problems.field(cls, path)
        if info is not None and info.annotation is kind:
            names.append(".".join(path))
    return names


FLOATS = _numeric_settings(float)
INTS = _numeric_settings(int)


def _error(overrides: dict[str, object]) -> str:
    with pytest.raises(ConfigError) as err:
        load_config(env={}, overrides=overrides)
    return str(err.value)


def test_the_walk_finds_the_settings_it_must_check():
    assert {"grace_seconds", "compaction.archive_ttl", "memory.mcp_timeout"} <= set(FLOATS)
    assert {"summariser.openai.timeout", "memory.max_keys"} <= set(FLOATS) | set(INTS)


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "Infinity", "NaN"])
@pytest.mark.parametrize("name", FLOATS)
def test_every_float_setting_refuses_non_finite_values(name, value):
    assert (
        _error({name: value}) == f"{name}={value!r} must be a finite number (on the command line)"
    )


@pytest.mark.parametrize("name", FLOATS + INTS)
def test_every_numeric_setting_refuses_negative_values(name):
    assert _error({name: "-1"}).startswith(f"{name} must be ")


@pytest.mark.parametrize("name", FLOATS)
def test_every_float_setting_refuses_a_duration_too_long_to_compute_with(name):
    """1e308 is finite, but ``int(1e308 * 1000)`` overflows as ``inf`` did."""
    assert _error({name: "1e308"}).startswith(f"{name} must be ")


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            {"compaction.archive_ttl": "1e308"},
            f"compaction.archive_ttl must be at most {MAX_SECONDS} seconds (100 years)",
        ),
        ({"grace_seconds": "-5"}, "grace_seconds must be 0 or more"),
        ({"store_probe_interval": "-1"}, "store_probe_interval must be 0 or more"),
        ({"memory.sweep_interval": "-1"}, "memory.sweep_interval must be 0 or more"),
        ({"memory.mcp_timeout": "0"}, "memory.mcp_timeout must be positive"),
        ({"compaction.archive_ttl": "inf"}, "compaction.archive_ttl='inf' must be a finite number"),
        ({"memory.mcp_timeout": "nan"}, "memory.mcp_timeout='nan' must be a finite number"),
    ],
)
def test_a_bad_number_names_the_setting_and_the_rule(overrides, message):
    assert _error(overrides) == f"{message} (on the command line)"


def test_zero_still_switches_off_what_it_documents():
    cfg = load_config(
        env={},
        overrides={
            "grace_seconds": "0",
            "store_probe_interval": "0",
            "memory.sweep_interval": "0",
            "compaction.archive_ttl": "0",
            "contexts.conversation_ttl": str(MAX_SECONDS),
        },
    )
    assert (cfg.grace_seconds, cfg.store_probe_interval, cfg.memory.sweep_interval) == (0, 0, 0)


def test_a_toml_infinity_is_refused_like_a_flag(tmp_path):
    path = tmp_path / "ctxd.toml"
    path.write_text("[compaction]\narchive_ttl = inf\n")
    with pytest.raises(ConfigError) as err:
        load_config(config_file=str(path), env={})
    assert str(err.value) == f"compaction.archive_ttl must be a finite number (in {path})"


@pytest.mark.parametrize(
    "setting, env, needle",
    [
        ("compaction.archive_ttl=inf", {}, "compaction.archive_ttl='inf' must be a finite number"),
        ("grace_seconds=nan", {}, "grace_seconds='nan' must be a finite number"),
        ("grace_seconds=-5", {}, "grace_seconds must be 0 or more"),
        (None, {"CTXD_MEMORY_MCP_TIMEOUT": "nan"}, "(from CTXD_MEMORY_MCP_TIMEOUT)"),
    ],
)
def test_serve_refuses_a_bad_number_with_one_line_and_exit_2(tmp_path, setting, env, needle):
    args = ["--listen", "127.0.0.1:0", "--store", f"lmdb://{tmp_path / 'data'}"]
    if setting is not None:
        args += ["--set", setting]
    proc = subprocess.run(
        [sys.executable, "-m", "ctxd_sidecar", "serve", *args],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, **env},
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("ctxd: configuration error: ") and needle in proc.stderr
    assert not (tmp_path / "data").exists()  # refused before the store was opened
