"""``skills.servers``: the list of MCP servers as specs.

Split from :mod:`ctxd_sidecar.config` to keep it short; like it, this module
imports nothing of the domain.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class McpServerSpec:
    """One configured MCP server: a stdio command line or a streamable HTTP URL."""

    name: str
    command: tuple[str, ...] = ()
    url: str = ""

    def describe(self) -> str:
        """For logs: the URL without credentials or query, or the program name."""
        if self.url:
            from urllib.parse import urlsplit

            parts = urlsplit(self.url)
            return f"{parts.scheme}://{parts.hostname or ''}{parts.path}"
        return os.path.basename(self.command[0]) if self.command else ""


def parse_servers(text: str) -> list[McpServerSpec]:
    """``skills.servers`` as specs; ValueError names the entry at fault."""
    import shlex

    specs: list[McpServerSpec] = []
    for raw in _split_entries(text):
        entry = raw.strip()
        if not entry or entry.startswith("#"):
            continue
        name, sep, target = entry.partition("=")
        name, target = name.strip(), target.strip()
        if not sep or not name or not target:
            raise ValueError(f"skills.servers: {entry!r} is not name=target")
        if len(name) > 64 or not all(c.isascii() and (c.isalnum() or c in "_-") for c in name):
            raise ValueError(f"skills.servers: server name {name!r} must be 1-64 of [A-Za-z0-9_-]")
        if any(s.name == name for s in specs):
            raise ValueError(f"skills.servers: server name {name!r} is used twice")
        if target.startswith(("http://", "https://")):
            specs.append(McpServerSpec(name=name, url=target))
        else:
            try:
                argv = shlex.split(target)
            except ValueError as exc:
                raise ValueError(f"skills.servers: {name}: {exc}") from None
            specs.append(McpServerSpec(name=name, command=tuple(argv)))
    return specs


def _split_entries(text: str) -> list[str]:
    """Split at newlines and at ``;`` outside quotes (a command may quote a ``;``)."""
    entries: list[str] = []
    current: list[str] = []
    quote = ""
    escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char in ";\n":
            entries.append("".join(current))
            current = []
            continue
        current.append(char)
    entries.append("".join(current))
    return entries
