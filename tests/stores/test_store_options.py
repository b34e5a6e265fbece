"""Every built-in store refuses a URI option it does not know: one line
naming it, exit 2, nothing opened (a misspelt option is never ignored)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ctxd_sidecar.plugin.manager import open_store


@pytest.mark.parametrize(
    ("uri", "bad"),
    [
        ("lmdb://{tmp}/data?map_sise=1GiB", "map_sise"),
        ("s3://bucket/prefix?regoin=eu-west-1", "regoin"),
        ("memory://?persist=true", "persist"),
    ],
)
def test_unknown_store_options_are_refused(tmp_path, uri, bad):
    uri = uri.format(tmp=tmp_path)
    with pytest.raises(ValueError, match=f"unknown .* store option '{bad}'"):
        open_store(uri)
    proc = subprocess.run(
        [sys.executable, "-m", "ctxd_sidecar", "serve", "--listen", "127.0.0.1:0", "--store", uri],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and bad in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "data").exists()  # nothing was created


def test_known_options_still_open(tmp_path):
    store = open_store(f"lmdb://{tmp_path / 'ok'}?map_size=64MiB")
    store.close()


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("connect_timeout=nan", "s3 store option connect_timeout='nan' must be a finite number"),
        ("read_timeout=inf", "s3 store option read_timeout='inf' must be a finite number"),
        ("read_timeout=-1", "s3 store option read_timeout must be positive"),
        ("max_attempts=inf", "s3 store option max_attempts='inf' must be a whole number"),
        ("max_attempts=2.5", "s3 store option max_attempts='2.5' must be a whole number"),
        ("max_attempts=0", "s3 store option max_attempts must be positive"),
    ],
)
def test_s3_numeric_options_are_finite_positive_numbers(option, message):
    uri = f"s3://bucket/prefix?{option}"
    with pytest.raises(ValueError) as err:
        open_store(uri)
    assert str(err.value) == message


def test_an_infinite_s3_option_stops_serve_with_one_line():
    uri = "s3://bucket/prefix?max_attempts=inf"
    proc = subprocess.run(
        [sys.executable, "-m", "ctxd_sidecar", "serve", "--listen", "127.0.0.1:0", "--store", uri],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "ctxd: cannot start: s3 store option max_attempts='inf' must be a whole number"
    ]


def test_known_options_are_named_as_the_uri_spells_them():
    pytest.importorskip("psycopg")
    with pytest.raises(ValueError) as err:
        open_store("postgres://ctxd@127.0.0.1:1/db?shema=t1")
    message = str(err.value)
    assert message.startswith("unknown postgres store option 'shema' (known options: ")
    known = message.split("known options: ", 1)[1].rstrip(")").split(", ")
    assert "schema" in known and "schema_name" not in known, message
