#!/usr/bin/env bash
# Regenerates the committed Python code for proto/ctxd/v1 into sidecar/ctxd_sidecar/api and
# into the client package (clients/python/ctxd_client/_api), each with its own
# import path, and copies the .proto files the packages ship.
# Pinned: grpcio-tools==1.85.1 (the `dev` extra). Run from anywhere.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
want="1.85.1"
have=$(python -c 'import grpc_tools, importlib.metadata as m; print(m.version("grpcio-tools"))')
if [ "$have" != "$want" ]; then
  echo "grpcio-tools $want required (found $have): pip install -e '.[dev]'" >&2
  exit 1
fi
# gen OUT PKG: protoc writes absolute imports ("from ctxd.v1 import x_pb2");
# make them point at the package the code lives in.
gen() {
  local out=$1 pkg=$2
  rm -rf "$out/ctxd"
  mkdir -p "$out"
  python -m grpc_tools.protoc -I proto \
    --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" \
    proto/ctxd/v1/*.proto
  sed -i "s/^from ctxd\.v1 import/from $pkg.ctxd.v1 import/" "$out"/ctxd/v1/*.py
  touch "$out/ctxd/__init__.py" "$out/ctxd/v1/__init__.py"
  echo "generated into $out/ctxd/v1"
}
gen sidecar/ctxd_sidecar/api ctxd_sidecar.api
gen clients/python/ctxd_client/_api ctxd_client._api
# The .proto files travel with the generated code (server wheel, Python client)
# and with the TypeScript package.
cp proto/ctxd/v1/*.proto sidecar/ctxd_sidecar/api/ctxd/v1/
cp proto/ctxd/v1/*.proto clients/python/ctxd_client/_api/ctxd/v1/
mkdir -p clients/typescript/proto/ctxd/v1
cp proto/ctxd/v1/*.proto clients/typescript/proto/ctxd/v1/
