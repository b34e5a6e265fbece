"""A restored transcript is built with the cyclic collector paused, and only then."""

from __future__ import annotations

import gc

import pytest

from ctxd_sidecar.core.heap import acyclic


def test_the_collector_is_paused_while_building_and_resumes_after_an_error():
    assert gc.isenabled()
    with pytest.raises(RuntimeError), acyclic():
        assert not gc.isenabled()
        raise RuntimeError("a build that fails")
    assert gc.isenabled()


def test_a_collector_someone_else_paused_stays_paused():
    gc.disable()
    try:
        with acyclic():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
