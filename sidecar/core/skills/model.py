"""The skills domain types: catalogue entries, bodies, a context's loaded set.

:class:`SkillRef` is the one definition of a loaded skill; contexts store
their loaded set as a list of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class SkillBody:
    name: str
    text: str
    hash: str
    truncated: bool


@dataclass(frozen=True)
class LoadResult:
    #: The context's loaded set after the load.
    refs: list[SkillRef]
    ref: SkillRef
    truncated: bool
    #: The name was already loaded with a different hash (the skill changed).
    changed: bool


@dataclass(frozen=True)
class PreloadResult:
    #: The context's loaded set afterwards (unchanged when nothing was loaded).
    refs: list[SkillRef]
    #: Skills loaded (or re-loaded with a new hash) by this call.
    loaded: list[SkillRef]
    #: Referenced names that are not in the catalogue.
    unknown: list[str]
    #: Referenced names that could not be loaded now -> why (server down, cap...).
    failed: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ResolvedSkill:
    """A loaded skill ready for the prompt."""

    name: str
    #: The hash the context loaded.
    hash: str
    #: The body to show; None when it is not cached and its server did not answer.
    text: str | None
    #: The hash the server serves now, when known.
    current_hash: str | None

    @property
    def changed(self) -> bool:
        return self.current_hash is not None and self.current_hash != self.hash
