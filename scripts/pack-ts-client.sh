#!/usr/bin/env bash
# Builds the TypeScript client (clients/typescript) into a tarball outside the clone and prints
# its path, for an app to install from a clone without leaving anything in it:
#   npm install "$(bash path/to/ctxd/scripts/pack-ts-client.sh)"
# (npm install ./clients/typescript would link the folder and build it there.)
set -euo pipefail
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../clients/typescript" && pwd)"
out="$(mktemp -d "${TMPDIR:-/tmp}/ctxd-client.XXXXXX")"
mkdir "$out/build"
tar -C "$src" --exclude=./node_modules --exclude=./dist --exclude=./.test-build -cf - . | tar -C "$out/build" -xf -
(cd "$out/build" && npm ci --no-audit --no-fund --loglevel=error >&2 && npm pack --pack-destination "$out" --loglevel=error >/dev/null)
rm -rf "$out/build"
ls "$out"/ctxd-client-*.tgz
