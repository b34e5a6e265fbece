"""Crash loops, model-based runs and load: long by nature, so every test here
is marked ``slow`` (``pytest -m "not slow"`` leaves them out; the full run
and CI keep them)."""

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items):
    for item in items:
        if Path(str(item.fspath)).parent == HERE:
            item.add_marker(pytest.mark.slow)
