"""Configuration: layers and their precedence, plugin tables, old names,
one-line errors (in process and from a real ``ctxd`` process, exit 2)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Annotated

import grpc
import pytest
from pydantic import Field

from ctxd_plugins.openai_summariser import OpenAIConfig
from ctxd_sidecar import cli
from ctxd_sidecar.config import Config, ConfigError, ConfigTable, Table
from ctxd_sidecar.config.loader import load_config
from ctxd_sidecar.core.compaction import Summary
from ctxd_sidecar.plugin import manager as plugins_mod
from ctxd_sidecar.plugin.spec import hookimpl
from tests.conftest import FAST_RECONNECT, wait_serving

OPENAI = "summariser.openai"


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "ctxd.toml"
    path.write_text(textwrap.dedent(text))
    return str(path)


# -- layers -----------------------------------------------------------------------------------


def test_defaults_then_file_then_environment_then_flags(tmp_path):
    path = write(
        tmp_path,
        """
        instance = "file"
        prefix = "file"
        store = "memory://"
        [contexts]
        keep_last = 3
        compact_at = 0.5
        [summariser.openai]
        model = "from-file"
        window = 9000
        """,
    )
    env = {"CTXD_PREFIX": "env", "CTXD_INSTANCE": "env", "CTXD_CONTEXTS_KEEP_LAST": "4"}
    env["CTXD_SUMMARISER_OPENAI_MODEL"] = "from-env"
    cfg = load_config(config_file=path, env=env, overrides={"instance": "flag"})
    assert (cfg.store, cfg.prefix, cfg.instance) == ("memory://", "env", "flag")
    assert (cfg.contexts.keep_last, cfg.contexts.compact_at) == (4, 0.5)
    assert cfg.contexts.checkpoint_every == 64  # default kept beside file values
    openai = cfg.table(OPENAI, OpenAIConfig)
    assert (openai.model, openai.window, openai.timeout) == ("from-env", 9000, 120.0)
    assert cfg.warnings == ()


def test_config_file_from_ctxd_config(tmp_path):
    path = write(tmp_path, 'instance = "named-by-env"\n')
    assert load_config(env={"CTXD_CONFIG": path}).instance == "named-by-env"


def test_constructing_config_reads_no_environment(monkeypatch):
    monkeypatch.setenv("CTXD_INSTANCE", "from-env")
    assert Config().instance == "default"
    assert Config().table(OPENAI, OpenAIConfig) == OpenAIConfig()


def test_values_are_typed_from_strings_and_toml(tmp_path):
    path = write(tmp_path, "grace_seconds = 3\n[contexts]\nauto_compact = false\n")
    cfg = load_config(
        config_file=path,
        env={"CTXD_MEMORY_SWEEP_INTERVAL": "0.5"},
        overrides={"log_level": "debug"},
    )
    assert cfg.grace_seconds == 3.0 and cfg.contexts.auto_compact is False
    assert cfg.memory.sweep_interval == 0.5 and cfg.log_level == "DEBUG"


def test_unknown_environment_variables_are_a_warning_naming_them():
    cfg = load_config(
        env={"CTXD_NOPE": "1", "CTXD_MEMORY_NOPE": "2", "CTXD_CRASH_POINT": "", "OTHER": "x"}
    )
    assert cfg.warnings == ("ignoring unknown environment variables: CTXD_MEMORY_NOPE, CTXD_NOPE",)


def test_the_config_module_imports_nothing_of_the_domain():
    code = (
        "import sys, ctxd_sidecar.config, ctxd_sidecar.config.loader;"
        "print(sorted(m for m in sys.modules"
        " if m.startswith(('ctxd_sidecar.core', 'ctxd_plugins'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


# -- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"contexts.compact_at": "1.5"}, "contexts.compact_at must be in (0, 1]"),
        ({"memory.max_keys": "lots"}, "memory.max_keys='lots' must be a whole number"),
        ({"memory.max_keys": True}, "memory.max_keys must be a number, not true or false"),
        ({"plan.max_items": "0"}, "plan.max_items must be positive"),
        ({"skills.refresh_interval": -1}, "skills.refresh_interval must be 0 or more"),
        ({"log_format": "xml"}, 'log_format must be "json" or "text"'),
        ({"log_level": "LOUD"}, "log_level must be DEBUG, INFO, WARNING, ERROR or CRITICAL"),
        ({"contexts.on_expire": "keep"}, 'contexts.on_expire must be "delete" or "archive"'),
        (
            {"instance": "a/b"},
            "instance must be 1-63 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit",
        ),
        ({"memory": "5"}, "memory must be a table"),
        ({f"{OPENAI}.window": "0"}, f"{OPENAI}.window must be positive"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_setting_and_its_origin(overrides, message):
    with pytest.raises(ConfigError) as err:
        load_config(env={}, overrides=overrides)
    assert str(err.value) == f"{message} (on the command line)"


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"bogus.setting": "1"}, "unknown setting 'bogus' on the command line"),
        ({"memory.bogus": "1"}, "unknown setting 'memory.bogus' on the command line"),
        ({"summariser.nosuch.key": "1"}, "unknown setting 'summariser.nosuch' on the command line"),
        ({"tls_cert_file": "c.pem"}, "tls_cert_file and tls_key_file must be set together"),
        (
            {"compaction.backoff_initial": "99999"},
            "compaction.backoff_initial must not exceed backoff_max",
        ),
        (
            {f"{OPENAI}.max_output_tokens": "40000"},
            f"{OPENAI}.max_output_tokens must be below {OPENAI}.window",
        ),
        (
            {"compaction.summariser": "openai"},
            f'compaction.summariser "openai" needs {OPENAI}.base_url and {OPENAI}.model',
        ),
        (
            {"memory.max_keys": "0", "plan.max_items": "0"},
            "memory.max_keys must be positive (on the command line) (and 1 more problem)",
        ),
    ],
)
def test_other_errors_are_one_line_too(overrides, message):
    with pytest.raises(ConfigError) as err:
        load_config(env={}, overrides=overrides)
    assert str(err.value) == message


def test_errors_say_which_file_or_variable_set_the_value(tmp_path):
    path = write(tmp_path, "[memory]\nmax_keys = 0\n[nosuch]\nx = 1\n")
    with pytest.raises(ConfigError) as err:
        load_config(config_file=path, env={})
    assert str(err.value) == f"unknown setting 'nosuch' in {path} (and 1 more problem)"
    path = write(tmp_path, "[memory]\nmax_keys = 0\n")
    with pytest.raises(ConfigError, match=rf"^memory.max_keys must be positive \(in {path}\)$"):
        load_config(config_file=path, env={})
    with pytest.raises(ConfigError, match=r"^memory.max_keys must be positive \(from CTXD_MEM"):
        load_config(env={"CTXD_MEMORY_MAX_KEYS": "-1"})
    with pytest.raises(ConfigError, match="^cannot read config file /nonexistent/ctxd.toml: No "):
        load_config(config_file="/nonexistent/ctxd.toml", env={})
    (tmp_path / "bad.toml").write_text("listen = \n")
    with pytest.raises(ConfigError, match="bad.toml is not valid TOML"):
        load_config(config_file=str(tmp_path / "bad.toml"), env={})


# -- the openai summariser's settings live in its own table only ------------------------------


def test_names_from_before_the_summariser_table_are_unknown(tmp_path):
    path = write(tmp_path, '[compaction]\nopenai_model = "m"\n')
    with pytest.raises(ConfigError, match="unknown setting 'compaction.openai_model'"):
        load_config(config_file=path, env={})
    with pytest.raises(ConfigError, match="unknown setting 'compaction.openai_model' on the com"):
        load_config(env={}, overrides={"compaction.openai_model": "a"})
    cfg = load_config(env={"CTXD_COMPACTION_OPENAI_MODEL": "old-in-env"})
    assert cfg.table(OPENAI, OpenAIConfig).model != "old-in-env"
    assert any("CTXD_COMPACTION_OPENAI_MODEL" in w for w in cfg.warnings)
    with pytest.raises(ConfigError, match=rf"^{OPENAI}.response_format must be .* \(from CTXD_SU"):
        load_config(env={"CTXD_SUMMARISER_OPENAI_RESPONSE_FORMAT": "xml"})


# -- a third-party plugin with a table of its own ---------------------------------------------


class EchoConfig(Table):
    greeting: str = "hello"
    repeat: Annotated[int, Field(gt=0, le=5)] = 1


class EchoSummariser:
    name = "echo"
    window_tokens = None
    max_output_tokens = 0

    def __init__(self, settings: EchoConfig) -> None:
        self.settings = settings

    async def summarise(self, request):
        return Summary(facts=[self.settings.greeting] * self.settings.repeat)


class EchoPlugin:
    """A summariser plugin as a third party writes one."""

    @hookimpl
    def ctxd_config_tables(self):
        return [ConfigTable("summariser.echo", EchoConfig)]

    @hookimpl
    def ctxd_summarisers(self, config):
        return [EchoSummariser(config.table("summariser.echo", EchoConfig))]


@pytest.fixture
def pm():
    pm = plugins_mod.plugin_manager()
    pm.register(EchoPlugin(), name="echo-plugin")
    return pm


def test_a_third_party_summariser_is_configured_through_toml_and_environment(tmp_path, pm):
    path = write(
        tmp_path, '[compaction]\nsummariser = "echo"\n[summariser.echo]\ngreeting = "hi"\n'
    )
    cfg = load_config(config_file=path, env={"CTXD_SUMMARISER_ECHO_REPEAT": "3"}, plugins=pm)
    assert cfg.table("summariser.echo", EchoConfig) == EchoConfig(greeting="hi", repeat=3)
    assert cfg.summariser.echo.repeat == 3  # also plain attribute access
    echo = plugins_mod.summarisers(cfg, pm)["echo"]
    assert (echo.settings.greeting, echo.settings.repeat) == ("hi", 3)
    assert cfg.warnings == ()


def test_a_third_party_table_is_validated_like_a_core_one(pm):
    with pytest.raises(ConfigError) as err:
        load_config(env={"CTXD_SUMMARISER_ECHO_REPEAT": "9"}, plugins=pm)
    assert str(err.value) == (
        "summariser.echo.repeat must be in (0, 5] (from CTXD_SUMMARISER_ECHO_REPEAT)"
    )
    with pytest.raises(ConfigError, match="^unknown setting 'summariser.echo.volume' on the"):
        load_config(env={}, overrides={"summariser.echo.volume": "11"}, plugins=pm)
    # without the plugin its table is unknown, and its variables only a warning
    with pytest.raises(ConfigError, match="^unknown setting 'summariser.echo' on the command"):
        load_config(env={}, overrides={"summariser.echo.repeat": "2"})
    cfg = load_config(env={"CTXD_SUMMARISER_ECHO_REPEAT": "2"})
    assert cfg.warnings == ("ignoring unknown environment variables: CTXD_SUMMARISER_ECHO_REPEAT",)


def test_a_plugin_table_may_not_take_a_core_name_or_lack_defaults():
    class Required(Table):
        needed: str

    for table, message in [
        (ConfigTable("memory.extra", EchoConfig), "plugin table 'memory.extra' clashes"),
        (ConfigTable("needs", Required), "every key of table 'needs' needs a default"),
    ]:

        class Plugin:
            @hookimpl
            def ctxd_config_tables(self, table=table):
                return [table]

        pm = plugins_mod.plugin_manager()
        pm.register(Plugin(), name="bad")
        with pytest.raises(ConfigError, match=message):
            load_config(env={}, plugins=pm)


def test_a_later_plugin_overrides_a_table_with_a_warning(pm):
    class Loud(Table):
        base_url: str = ""
        model: str = ""
        volume: int = 11

    class Replacement:
        @hookimpl
        def ctxd_config_tables(self):
            return [ConfigTable(OPENAI, Loud)]

    pm.register(Replacement(), name="replacement")
    cfg = load_config(env={}, overrides={f"{OPENAI}.volume": "3"}, plugins=pm)
    assert cfg.table(OPENAI, Loud).volume == 3
    assert cfg.warnings == (
        f"config table '{OPENAI}' of ctxd_plugins.openai_summariser is overridden by replacement",
    )


# -- entry points -----------------------------------------------------------------------------


def _installed(site: Path, group: str, name: str, source: str) -> None:
    """A distribution on ``site`` with one entry point (what pip would leave)."""
    (site / f"{name}.py").write_text(textwrap.dedent(source))
    info = site / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n{name} = {name}\n")


PLUGIN_SOURCE = """
    from pydantic import BaseModel
    from ctxd_sidecar.config import ConfigTable, Table
    from ctxd_sidecar.plugin.spec import hookimpl
    from ctxd_plugins.memory_store import MemoryStore


    class Settings(Table):
        tag: str = "none"


    class TaggedStore(MemoryStore):
        def describe(self):
            return "tagged memory"


    @hookimpl
    def ctxd_config_tables():
        return [ConfigTable("tagged", Settings)]


    @hookimpl
    def ctxd_store_schemes():
        return ["memory"]


    @hookimpl
    def ctxd_open_store(scheme, uri, options):
        return TaggedStore() if scheme == "memory" else None
"""


@pytest.fixture
def tagged_site(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    _installed(site, "ctxd.plugins", "ctxd_tagged", PLUGIN_SOURCE)
    monkeypatch.syspath_prepend(str(site))
    yield site
    sys.modules.pop("ctxd_tagged", None)


def test_the_ctxd_plugins_group_loads_and_may_override_a_built_in_scheme(tagged_site, caplog):
    caplog.set_level(logging.WARNING, "ctxd_sidecar.plugin.manager")
    pm = plugins_mod.plugin_manager()
    assert plugins_mod.scheme_owners(pm)["memory"] == ["ctxd_plugins.memory_store", "ctxd_tagged"]
    (warning,) = [r for r in caplog.records if r.getMessage().startswith("store scheme over")]
    assert (warning.scheme, warning.plugin) == ("memory", "ctxd_tagged")
    store = plugins_mod.open_store("memory://", pm)
    try:
        assert store.describe() == "tagged memory"
    finally:
        store.close()
    assert load_config(env={"CTXD_TAGGED_TAG": "x"}, plugins=pm).tagged.tag == "x"


def test_ctxd_plugins_shows_each_scheme_with_the_plugin_that_serves_it(tagged_site):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tagged_site), *sys.path])}
    out = subprocess.run(
        [sys.executable, "-m", "ctxd_sidecar", "plugins"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.splitlines()
    assert "  memory: ctxd_tagged (overrides ctxd_plugins.memory_store)" in out
    assert "  tagged: ctxd_tagged" in out
    assert out.index("summarisers (name: plugin)") < out.index(
        "  extractive: ctxd_plugins.extractive_summariser"
    )


# -- a real process: one line, exit 2 ---------------------------------------------------------


def run_ctxd(*args: str, env: dict[str, str] | None = None, script: bool = False):
    ctxd = Path(sys.executable).with_name("ctxd")
    cmd = [str(ctxd)] if script else [sys.executable, "-m", "ctxd_sidecar"]
    return subprocess.run(
        [*cmd, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize(
    "args, env, needle",
    [
        (["--log-level", "LOUD"], {}, "log_level must be DEBUG, INFO, WARNING, ERROR or CRITICAL"),
        (["--config", "/nonexistent/ctxd.toml"], {}, "cannot read config file /nonexistent/ctxd"),
        (["--set", "memory.max_keys=0"], {}, "memory.max_keys must be positive"),
        (["--set", "nosuch.key=1"], {}, "unknown setting 'nosuch' on the command line"),
        ([], {"CTXD_MEMORY_MAX_KEYS": "lots"}, "(from CTXD_MEMORY_MAX_KEYS)"),
        ([], {"CTXD_COMPACTION_SUMMARISER": "openai"}, "needs summariser.openai.base_url"),
        (["--set", "summariser.openai.window=5"], {}, "summariser.openai.max_output_tokens"),
    ],
)
def test_serve_with_a_bad_setting_prints_one_line_and_exits_2(args, env, needle):
    proc = run_ctxd("serve", "--store", "memory://", *args, env=env)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("ctxd: configuration error: ")
    assert needle in proc.stderr


def test_the_console_script_and_other_verbs_behave_the_same(tmp_path):
    toml = write(tmp_path, "[nosuch]\nx = 1\n")
    for proc in (
        run_ctxd("serve", "--log-level", "LOUD", script=True),
        run_ctxd("plugins", "--config", toml),
        run_ctxd("migrate", "--from", "memory://", "--to", "memory://", "--config", toml),
    ):
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_serve_warns_at_start_about_unknown_variables(tmp_path):
    sock = tmp_path / "ctxd.sock"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctxd_sidecar", "serve", "--store", "memory://"]
        + ["--listen", f"unix:{sock}", "--set", "log_format=text"],
        env={**os.environ, "CTXD_LISTNE": "typo", "CTXD_COMPACTION_OPENAI_MODEL": "m"},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        channel = grpc.insecure_channel(f"unix:{sock}", options=FAST_RECONNECT)
        wait_serving(channel, 15, proc)
        channel.close()
    finally:
        proc.terminate()
        assert proc.wait(20) == 0
    lines = proc.stderr.read().splitlines()
    # A name from before the summariser table is as unknown as a typo.
    assert (
        "WARNING ctxd: ignoring unknown environment variables: "
        "CTXD_COMPACTION_OPENAI_MODEL, CTXD_LISTNE" in lines[0]
    )


# -- help -------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["--help"], ["serve", "--help"], ["plugins", "--help"]])
def test_help_is_plain_text(argv, capsys):
    with pytest.raises(SystemExit):
        cli.main(argv)
    out = capsys.readouterr().out
    assert "usage: ctxd" in out and "`" not in out and ":class:" not in out
