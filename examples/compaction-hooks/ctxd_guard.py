"""An example ctxd plugin acting around compaction.

* ``ctxd_redact`` masks credentials (AWS access keys, bearer tokens,
  ``password=``/``token=``/``secret=`` assignments, private-key blocks)
  before folded messages leave ctxd for a summariser model;
* ``ctxd_compacted`` re-anchors the kept window: after each compaction it
  appends a note naming the last thing the user asked, so the model picks
  the thread up again even when the summary is terse.

Install it like any plugin (``[project.entry-points."ctxd.plugins"]
guard = "ctxd_guard"``); ``ctxd plugins`` then lists it.
"""

from __future__ import annotations

import re

from ctxd_sidecar.plugin import hookimpl

_PATTERNS = (
    re.compile(r"AKIA[0-9A-Z]{16}"),
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{8,}"),
    re.compile(r"(?i)\b(password|passwd|token|secret|api_key)\s*[=:]\s*[^\s\"',;]+"),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S),
)
MASK = "[redacted]"
#: Longest user request quoted in the re-anchoring note.
QUOTE_CHARS = 200


@hookimpl
def ctxd_redact(context_id: str, text: str) -> str | None:
    out = text
    for pattern in _PATTERNS:
        out = pattern.sub(MASK, out)
    return out if out != text else None


@hookimpl
def ctxd_compacted(context_id, compaction, kept) -> str | None:
    asks = [m.text for m in kept if m.kind == "user" and m.text]
    if not asks:
        return None
    last = " ".join(asks[-1].split())[:QUOTE_CHARS]
    return (
        f"Compacted {compaction.folded} earlier messages ({compaction.id}). Current request: {last}"
    )
