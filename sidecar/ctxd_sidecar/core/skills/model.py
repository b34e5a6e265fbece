"""The skills domain types: catalogue entries and a context's loaded set.

:class:`SkillRef` is the one definition of a loaded skill; contexts store
their loaded set as a list of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# -- state kept in the context record -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SkillRef:
    """A loaded skill: its name and the SHA-256 of the body that was loaded."""

    name: str
    hash: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "hash": self.hash}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SkillRef:
        return cls(str(data["name"]), str(data["hash"]))


def refs_to_list(refs: Iterable[SkillRef]) -> list[dict[str, str]]:
    return [r.to_dict() for r in refs]


def refs_from_list(data: Iterable[Mapping[str, Any]]) -> list[SkillRef]:
    return [SkillRef.from_dict(d) for d in data]


# -- catalogue and results ------------------------------------------------------------------


@dataclass(frozen=True)
class SkillInfo:
    """One catalogue entry."""

    name: str
    description: str
    when_to_use: str
    #: The configured MCP server it comes from.
    server: str
    #: "prompt" or "resource".
    kind: str
    #: The prompt name or the resource URI on that server.
    locator: str
    #: False while its server is down or not answering.
    available: bool = True

    @property
    def source(self) -> str:
        """``<server>:<kind>``, e.g. ``docs:prompt``."""
        return f"{self.server}:{self.kind}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "when_to_use": self.when_to_use,
            "source": self.source,
            "available": self.available,
        }

    def signature(self) -> tuple[str, ...]:
        return (self.name, self.description, self.when_to_use, self.server, self.kind, self.locator)
