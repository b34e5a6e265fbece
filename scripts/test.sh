#!/usr/bin/env bash
# Installs ctxd with its test dependencies into .venv and runs the whole suite.
# Extra arguments go to pytest (e.g. scripts/test.sh -k memory).
# Tests run in parallel workers (pytest-xdist): the suite waits on sidecar and
# moto processes more than it computes, so 4 workers beat 2 even on 2 cores;
# CTXD_TEST_WORKERS changes that (0 runs in this process). Crash, load and drain
# tests share one worker (xdist_group "timing", tests/conftest.py).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[test]'
# Bytecode written once, as an install has it: the suite starts many sidecar
# processes, and with PYTHONDONTWRITEBYTECODE set (CI, containers) each would
# compile every module again.
.venv/bin/python -m compileall -q sidecar plugins tests bench clients/python/ctxd_client
exec .venv/bin/python -m pytest -n "${CTXD_TEST_WORKERS:-4}" --dist loadgroup "$@"
