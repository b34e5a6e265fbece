#!/usr/bin/env bash
# Installs ctxd with its test dependencies into .venv and runs the whole suite.
# Extra arguments go to pytest (e.g. scripts/test.sh -k memory).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[test]'
exec .venv/bin/python -m pytest "$@"
