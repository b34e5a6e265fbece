"""Benchmarks for ctxd, run with ``python -m bench`` from the repo root.

The first suites measure the *floor* (bare gRPC echo, raw LMDB, raw boto3
against moto) so that ctxd figures can be reported as ratios to what the
underlying stack costs on the same machine in the same run. See
``bench.harness`` for how to add measurements.
"""
