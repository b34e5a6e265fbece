#!/usr/bin/env bash
# Takes the pictures of docs/operations/ui.md again: the ctxd ui browser tests
# run with CTXD_UI_SCREENSHOTS=1 and write docs/operations/img/ui-*.png
# (needs the test extra in .venv and Chromium at /usr/bin/chromium).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
CTXD_UI_SCREENSHOTS=1 .venv/bin/python -m pytest -q -p no:cacheprovider -p no:xdist \
  tests/ui/test_browser.py "$@"
ls -1 docs/operations/img/ui-*.png
