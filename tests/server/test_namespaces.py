"""Deployments sharing one bucket cannot read each other's keys: ``prefix``
and ``instance`` are single key segments that never name a namespace ctxd
writes under, so no deployment's key space can nest in another's."""

from __future__ import annotations

import itertools

import pytest

from ctxd_sidecar import config as config_mod
from ctxd_sidecar.api.ctxd.v1 import memory_pb2 as mpb
from ctxd_sidecar.config.loader import load_config
from ctxd_sidecar.core.contexts import persistence
from ctxd_sidecar.core.memory import NAMESPACE as MEMORY

TRICKY = [
    ("ctxd/default", "memory"),  # would list prefix=ctxd instance=default as memory/<key>
    ("ctxd", "default/memory"),
    ("ctxd", "memory"),
    ("ctxd", "contexts"),
    ("contexts", "x"),
    ("ctxd", "context-log"),
    ("ctxd", ""),
    ("", "default"),
    ("ctxd", "."),
    ("ctxd", ".."),
    ("ctxd", "_index"),
    ("ctxd", "a b"),
    ("ctxd", "x" * 64),
    ("/ctxd", "default"),
]


@pytest.mark.parametrize(("prefix", "instance"), TRICKY)
def test_namespaces_that_could_nest_are_refused(prefix, instance):
    with pytest.raises(ValueError) as err:
        load_config(env={}, overrides={"prefix": prefix, "instance": instance})
    assert "prefix" in str(err.value) or "instance" in str(err.value)


def test_the_reserved_names_are_the_namespaces_ctxd_writes():
    written = {
        persistence.HEADS,
        persistence.LOGS,
        persistence.SEGMENTS,
        persistence.TRASH,
        MEMORY,
        "health",  # the store probe's key
    }
    assert written == config_mod.RESERVED_SEGMENTS


def test_valid_namespaces_never_nest():
    names = ["ctxd", "a", "b.c", "team-1", "default"]
    roots = [f"{p}/{i}/" for p, i in itertools.product(names, names)]
    for x, y in itertools.permutations(roots, 2):
        for ns in config_mod.RESERVED_SEGMENTS:
            assert not y.startswith(f"{x}{ns}/") and not f"{y}".startswith(x)


def test_two_deployments_on_one_bucket_see_only_their_own_memory(start_sidecar, store_uri_for):
    uri = store_uri_for("s3")
    a = start_sidecar(uri, prefix="ctxd", instance="default")
    b = start_sidecar(uri, prefix="ctxd", instance="other")
    a.memory.Set(mpb.SetRequest(key="secret", value_json='"a"'))
    b.memory.Set(mpb.SetRequest(key="mine", value_json='"b"'))
    assert [r.key for r in a.memory.List(mpb.ListRequest()).records] == ["secret"]
    assert [r.key for r in b.memory.List(mpb.ListRequest()).records] == ["mine"]
