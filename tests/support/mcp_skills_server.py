"""A real MCP server offering skills, for the skills tests.

    python tests/support/mcp_skills_server.py DIR            # stdio
    python tests/support/mcp_skills_server.py DIR --http PORT  # streamable HTTP on 127.0.0.1

Everything is read from DIR on every request, so a test changes the server's
skills (or makes it slow) between steps by editing files:

* ``DIR/prompts/<name>.md``  -> prompt ``<name>`` (prompts/list, prompts/get)
* ``DIR/resources/<name>.md`` -> resource ``skill://<name>`` (mimeType
  ``text/x-skill+markdown``)
* ``DIR/skillmd/<name>.md``   -> resource ``skill://<name>/SKILL.md`` (mimeType
  ``text/markdown``, listed without a description: the client reads the
  front matter)
* ``DIR/mime/<name>.md``      -> resource ``docs://guides/<name>.md`` named
  ``<name>`` with mimeType ``text/x-skill+markdown``
* ``DIR/delay``               -> seconds every list/get/read waits first
* ``DIR/crash``               -> the next list/get/read makes the process exit

Descriptions come from each file's front matter (``description:``,
``when_to_use:``). The server also offers things that are not skills (a plain
text resource, the bare ``skill://`` index, a supporting file under a skill,
a prompt with a required argument) which a client must ignore.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import shlex
import sys

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

SKILL_MIME = "text/x-skill+markdown"


def command_line(root: pathlib.Path, *extra: str) -> str:
    """The shell-quoted command that serves ``root`` over stdio (for skills.servers)."""
    return shlex.join([sys.executable, str(pathlib.Path(__file__).resolve()), str(root), *extra])


def write_skill(
    root: pathlib.Path,
    kind: str,
    name: str,
    body: str,
    *,
    description: str | None = None,
    when_to_use: str | None = None,
) -> pathlib.Path:
    """Write a skill file; ``kind`` is prompts, resources, skillmd or mime."""
    meta = [f"name: {name}"]
    if description is not None:
        meta.append(f"description: {description}")
    if when_to_use is not None:
        meta.append(f"when_to_use: {when_to_use}")
    path = root / kind / f"{name}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("---\n" + "\n".join(meta) + "\n---\n\n" + body)
    return path


def front_matter(text: str) -> dict[str, str]:
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return {}
    out: dict[str, str] = {}
    for line in lines[1:]:
        if line.strip() == "---":
            break
        key, _, value = line.partition(":")
        out[key.strip()] = value.strip()
    return out


def description(text: str) -> str | None:
    meta = front_matter(text)
    desc = meta.get("description")
    if desc and meta.get("when_to_use"):
        desc += f" When to use: {meta['when_to_use']}"
    return desc


def build(root: pathlib.Path) -> Server:
    def files(sub: str) -> list[pathlib.Path]:
        folder = root / sub
        return sorted(folder.glob("*.md")) if folder.is_dir() else []

    async def slow() -> None:
        if (root / "crash").exists():
            os._exit(3)  # the server dies mid-session
        delay = root / "delay"
        if delay.exists():
            await asyncio.sleep(float(delay.read_text() or 0))

    async def list_prompts(ctx, params) -> types.ListPromptsResult:
        await slow()
        prompts = [
            types.Prompt(name=f.stem, description=description(f.read_text()))
            for f in files("prompts")
        ]
        prompts.append(
            types.Prompt(
                name="parameterised",
                description="Needs an argument, so it is not a skill",
                arguments=[types.PromptArgument(name="topic", required=True)],
            )
        )
        return types.ListPromptsResult(prompts=prompts)

    async def get_prompt(ctx, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        await slow()
        path = root / "prompts" / f"{params.name}.md"
        if not path.exists():
            raise MCPError(-32602, f"unknown prompt {params.name}")
        text = path.read_text()
        # Split at the first blank line: a client joins the parts with one.
        parts = text.split("\n\n", 1)
        return types.GetPromptResult(
            messages=[
                types.PromptMessage(role="user", content=types.TextContent(type="text", text=t))
                for t in parts
            ]
        )

    def resources() -> list[tuple[types.Resource, pathlib.Path | None]]:
        out: list[tuple[types.Resource, pathlib.Path | None]] = [
            (types.Resource(uri="skill://", name="index", mime_type="application/json"), None),
            (types.Resource(uri="docs://readme", name="readme", mime_type="text/plain"), None),
        ]
        for f in files("resources"):
            out.append(
                (
                    types.Resource(
                        uri=f"skill://{f.stem}",
                        name=f.stem,
                        description=description(f.read_text()),
                        mime_type=SKILL_MIME,
                    ),
                    f,
                )
            )
        for f in files("skillmd"):
            out.append(
                (
                    types.Resource(
                        uri=f"skill://{f.stem}/SKILL.md", name="SKILL.md", mime_type="text/markdown"
                    ),
                    f,
                )
            )
            out.append(
                (
                    types.Resource(
                        uri=f"skill://{f.stem}/references/notes.md",
                        name="notes.md",
                        mime_type="text/markdown",
                    ),
                    None,
                )
            )
        for f in files("mime"):
            out.append(
                (
                    types.Resource(
                        uri=f"docs://guides/{f.stem}.md",
                        name=f.stem,
                        description=description(f.read_text()),
                        mime_type=SKILL_MIME,
                    ),
                    f,
                )
            )
        return out

    async def list_resources(ctx, params) -> types.ListResourcesResult:
        await slow()
        return types.ListResourcesResult(resources=[r for r, _ in resources()])

    async def read_resource(
        ctx, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        await slow()
        uri = str(params.uri)
        for res, path in resources():
            if str(res.uri) == uri:
                text = path.read_text() if path else "not a skill"
                return types.ReadResourceResult(
                    contents=[
                        types.TextResourceContents(uri=uri, mime_type=res.mime_type, text=text)
                    ]
                )
        raise MCPError(-32602, f"unknown resource {uri}")

    return Server(
        "ctxd-test-skills",
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
    )


async def serve_stdio(server: Server) -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("root", type=pathlib.Path)
    parser.add_argument("--http", type=int, default=0, help="serve streamable HTTP on this port")
    args = parser.parse_args()
    server = build(args.root)
    if args.http:
        import uvicorn

        uvicorn.run(
            server.streamable_http_app(), host="127.0.0.1", port=args.http, log_level="warning"
        )
    else:
        asyncio.run(serve_stdio(server))


if __name__ == "__main__":
    main()
