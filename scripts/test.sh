#!/usr/bin/env bash
# Installs ctxd with its test dependencies into .venv and runs the suite.
#
#   scripts/test.sh            the default set: everything but the slow tests
#   scripts/test.sh slow       the slow set: crash loops, long model-based and load runs
#   scripts/test.sh all        both
#
# Further arguments go to pytest (scripts/test.sh -k memory; a -m of your own
# replaces the set's). Tests run in parallel workers (pytest-xdist): the suite
# waits on sidecar and moto processes more than it computes, so 4 workers beat
# 2 even on 2 cores; CTXD_TEST_WORKERS changes that (0 runs in this process).
# Crash, load and drain tests share one worker (xdist_group "timing").
# CTXD_COVERAGE=1 measures branch coverage, sidecar processes included, and
# prints the report (pyproject.toml [tool.coverage]).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
set_marker=(-m "not slow")
case "${1:-}" in
  slow) set_marker=(-m slow); shift ;;
  all) set_marker=(); shift ;;
esac
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[test]'
# Bytecode written once, as an install has it: the suite starts many sidecar
# processes, and with PYTHONDONTWRITEBYTECODE set (CI, containers) each would
# compile every module again.
.venv/bin/python -m compileall -q sidecar plugins tests bench clients/python/ctxd_client
# A worker that dies (out of memory, say) fails the run once: xdist would
# otherwise start its test again on a fresh worker, and again.
pytest_args=(-n "${CTXD_TEST_WORKERS:-4}" --dist loadgroup --max-worker-restart 1
  "${set_marker[@]}" "$@")
# Not a server setting: the sidecars the tests start would warn about it.
unset CTXD_TEST_WORKERS
if [ "${CTXD_COVERAGE:-0}" != "1" ]; then
  exec .venv/bin/python -m pytest "${pytest_args[@]}"
fi
unset CTXD_COVERAGE
export COVERAGE_DATA_DIR="$root"
.venv/bin/python -m coverage erase
status=0
.venv/bin/python -m coverage run -m pytest "${pytest_args[@]}" || status=$?
.venv/bin/python -m coverage combine -q
.venv/bin/python -m coverage report --format=total | sed 's/^/branch coverage: /'
.venv/bin/python -m coverage report --skip-covered -m > coverage-report.txt || true
exit "$status"
