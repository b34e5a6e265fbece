#!/usr/bin/env python3
"""Print an overlay's manifests as one YAML stream, for clusters or tools
without kustomize (``kubectl apply -k`` does the same from the same files)::

    python deploy/kubernetes/compose.py overlays/s3 | kubectl apply -f -

Understands what these kustomizations use: ``resources`` (files and
directories with a kustomization.yaml) and ``patches`` with a ``path`` to a
strategic-merge patch, merged as Kubernetes does for these fields (maps
recursively, lists of named items by ``name``, other lists replaced).
Needs PyYAML.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml


def _merge(base, patch):
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for key, value in patch.items():
            out[key] = _merge(base[key], value) if key in base else value
        return out
    if isinstance(base, list) and isinstance(patch, list) and _named(base) and _named(patch):
        out = list(base)
        index = {item["name"]: n for n, item in enumerate(out)}
        for item in patch:
            if item["name"] in index:
                out[index[item["name"]]] = _merge(out[index[item["name"]]], item)
            else:
                out.append(item)
        return out
    return patch


def _named(items: list) -> bool:
    return all(isinstance(i, dict) and "name" in i for i in items)


def compose(directory: Path) -> list[dict]:
    """The resources a kustomization directory produces, patches applied."""
    spec = yaml.safe_load((directory / "kustomization.yaml").read_text())
    docs: list[dict] = []
    for entry in spec.get("resources", []):
        path = directory / entry
        if path.is_dir():
            docs.extend(compose(path))
        else:
            docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    for patch in spec.get("patches", []):
        body = yaml.safe_load((directory / patch["path"]).read_text())
        key = (body["kind"], body["metadata"]["name"])
        hits = [n for n, d in enumerate(docs) if (d["kind"], d["metadata"]["name"]) == key]
        if not hits:
            raise SystemExit(f"{directory / patch['path']}: no {key[0]} {key[1]} to patch")
        for n in hits:
            docs[n] = _merge(docs[n], body)
    return docs


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: compose.py OVERLAY_DIR", file=sys.stderr)
        return 2
    here = Path(__file__).resolve().parent
    directory = Path(argv[0])
    if not directory.is_absolute() and not directory.exists():
        directory = here / directory
    yaml.safe_dump_all(compose(directory), sys.stdout, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
