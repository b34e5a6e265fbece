"""Skills: named instruction bundles (the SKILL.md idiom) from MCP servers.

The catalogue is built from the MCP servers named in ``skills.servers``:

* **prompts** - every prompt without required arguments is a skill; the
  catalogue comes from ``prompts/list``, the body from ``prompts/get`` (its
  text parts joined by a blank line);
* **resources** - ``skill://<name>`` (any mimeType), ``skill://<name>/SKILL.md``
  (``text/markdown``; named ``<name>``), and any other URI whose mimeType is
  ``text/x-skill+markdown`` (named by the resource's name). The bare
  ``skill://`` index and deeper paths under a skill (its supporting files) are
  not skills.

A description is taken from the listing; "When to use:" / "Use when:" in it
splits off ``when_to_use``. An entry listed without a description is read
once per refresh and its front matter (``---`` block with ``description:``
and ``when_to_use:``) fills both. The catalogue name always comes from the
prompt name, the URI or the resource name (never the front matter), so a
reference resolves to the same entry whatever the body says. On a name
collision the first wins: available servers before unavailable ones, then
the order of ``skills.servers``, then prompts before resources.

Bodies are fetched on demand, capped at ``skills.max_body_bytes`` (cut on a
character boundary, a note appended), hashed with SHA-256 and cached in
memory by hash - never stored. A context records only ``[{name, hash}]``,
so a body edited on the server shows up as a different current hash
(:meth:`SkillCatalogue.stale`).

One long-lived MCP session per server, owned by a background task: it
connects (bounded by ``connect_timeout``), lists, refreshes every
``refresh_interval``, and on any failure reconnects with exponential
back-off up to ``max_backoff``. Calls made by requests are bounded by
``call_timeout``; a server that is not connected fails at once. So a server
that is down or slow never holds a turn longer than one call timeout, and its
skills stay in the catalogue with ``available=False``. Whenever the entries
change (not their availability) :attr:`SkillCatalogue.generation` increments;
the prompt uses it, with :meth:`SkillCatalogue.connected`, to rebuild a
frozen prompt prefix at once.
"""

from ctxd_sidecar.core.skills.cache import BodyCache, body_hash, cap_body
from ctxd_sidecar.core.skills.catalogue import (
    LoadResult,
    PreloadResult,
    ResolvedSkill,
    SkillBody,
    SkillCatalogue,
)
from ctxd_sidecar.core.skills.frontmatter import (
    MAX_DESCRIPTION_CHARS,
    REFERENCE_PREFIX,
    find_references,
    parse_front_matter,
    split_description,
)
from ctxd_sidecar.core.skills.link import SKILL_MIME, SKILL_SCHEME, ServerLink, classify_resource
from ctxd_sidecar.core.skills.model import SkillInfo, SkillRef, refs_from_list, refs_to_list

__all__ = [
    "MAX_DESCRIPTION_CHARS",
    "REFERENCE_PREFIX",
    "SKILL_MIME",
    "SKILL_SCHEME",
    "BodyCache",
    "LoadResult",
    "PreloadResult",
    "ResolvedSkill",
    "ServerLink",
    "SkillBody",
    "SkillCatalogue",
    "SkillInfo",
    "SkillRef",
    "body_hash",
    "cap_body",
    "classify_resource",
    "find_references",
    "parse_front_matter",
    "refs_from_list",
    "refs_to_list",
    "split_description",
]
