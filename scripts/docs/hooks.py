"""MkDocs hooks: fill the generated parts of the docs at build time.

A page holds a marker where generated Markdown goes:

* ``<!-- ctxd:config-reference -->``: every setting, from the pydantic schema;
* ``<!-- ctxd:store-options -->``: every URI option of the built-in stores,
  from their options models;
* ``<!-- ctxd:api-reference -->``: every RPC, message, field and enum, from
  the protos' comments (compiled by buf);
* ``<!-- ctxd:bench-figures -->``: tables and charts of a bench results file
  (``CTXD_BENCH_RESULTS``, else ``docs/benchmarks/results.json``).

Nothing generated is committed, so the pages cannot go stale.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]


def _importable() -> None:
    """The repository's modules on sys.path (MkDocs restores it after loading hooks)."""
    for path in (ROOT / "scripts" / "docs", ROOT):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))


MARKERS = {
    "<!-- ctxd:config-reference -->": "config",
    "<!-- ctxd:store-options -->": "stores",
    "<!-- ctxd:api-reference -->": "api",
    "<!-- ctxd:bench-figures -->": "bench",
}
BENCH_DEFAULT = ROOT / "docs" / "benchmarks" / "results.json"

_bench_cache: dict[str, object] = {}


def _bench() -> tuple[str, dict[str, str]]:
    """(Markdown, {file name: SVG}) of the benchmark results, computed once per build."""
    if "md" not in _bench_cache:
        _importable()
        from bench.figures import render

        path = Path(os.environ.get("CTXD_BENCH_RESULTS") or BENCH_DEFAULT)
        results = json.loads(path.read_text())
        md, charts = render(
            results,
            source=path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name,
        )
        _bench_cache["md"], _bench_cache["charts"] = md, charts
    return _bench_cache["md"], _bench_cache["charts"]  # type: ignore[return-value]


def on_files(files, config):
    """Add the benchmark charts as generated files, so pages can link them."""
    _md, charts = _bench()
    for name, svg in charts.items():
        files.append(File.generated(config, f"benchmarks/{name}", content=svg))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    _importable()
    for marker, kind in MARKERS.items():
        if marker not in markdown:
            continue
        if kind == "config":
            from config_reference import render as generated
        elif kind == "stores":
            from store_options import render as generated
        elif kind == "api":
            from api_reference import render as generated
        else:

            def generated() -> str:
                return _bench()[0]

        markdown = markdown.replace(marker, generated())
    return markdown
