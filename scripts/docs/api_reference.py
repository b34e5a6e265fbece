"""The API reference page, generated from the protos' comments.

``buf build`` compiles ``proto/`` into a FileDescriptorSet that keeps the
source comments; this module walks it and writes every service, RPC,
message, field, enum and value with the comment written above it, so the
reference is the contract's own words.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from google.protobuf import descriptor_pb2 as pb

ROOT = Path(__file__).resolve().parents[2]

# Field numbers inside descriptor protos, as used by SourceCodeInfo paths.
FILE_MESSAGE, FILE_ENUM, FILE_SERVICE = 4, 5, 6
MSG_FIELD, MSG_NESTED, MSG_ENUM, MSG_ONEOF = 2, 3, 4, 8
ENUM_VALUE, SERVICE_METHOD = 2, 2

SCALARS = {
    value: name.removeprefix("TYPE_").lower()
    for name, value in pb.FieldDescriptorProto.Type.items()
    if name not in ("TYPE_MESSAGE", "TYPE_ENUM", "TYPE_GROUP")
}


def buf_executable() -> str:
    """buf from the running environment (the buf-bin package), else PATH."""
    local = Path(sys.executable).with_name("buf")
    found = str(local) if local.exists() else shutil.which("buf")
    if not found:
        raise RuntimeError("buf not found: pip install buf-bin (in the docs and test extras)")
    return found


def descriptor_set() -> pb.FileDescriptorSet:
    """``proto/`` compiled by buf, comments included."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ctxd.binpb"
        subprocess.run(
            [buf_executable(), "build", "-o", str(out)], cwd=ROOT, check=True, timeout=120
        )
        fds = pb.FileDescriptorSet()
        fds.ParseFromString(out.read_bytes())
        return fds


def anchor(full_name: str) -> str:
    return full_name.removeprefix(".").replace(".", "-").lower()


class Comments:
    """Leading comments of one file by SourceCodeInfo path."""

    def __init__(self, file: pb.FileDescriptorProto) -> None:
        self._by_path = {
            tuple(loc.path): loc.leading_comments.strip()
            for loc in file.source_code_info.location
            if loc.leading_comments
        }

    def at(self, *path: int) -> str:
        text = self._by_path.get(tuple(path), "")
        # proto comments are prose with hard wraps; keep paragraphs, join lines
        paragraphs = [" ".join(p.split()) for p in text.split("\n\n")]
        return "\n\n".join(p for p in paragraphs if p)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n\n", "<br><br>").replace("\n", " ")


def _type_link(field: pb.FieldDescriptorProto) -> str:
    if field.type in (field.TYPE_MESSAGE, field.TYPE_ENUM):
        name = field.type_name.removeprefix(".")
        if name.startswith("ctxd."):
            return f"[`{name.rsplit('.', 1)[-1]}`](#{anchor(name)})"
        return f"`{name}`"
    return f"`{SCALARS[field.type]}`"


def _message(
    out: list[str], msg: pb.DescriptorProto, prefix: str, c: Comments, path: tuple[int, ...]
) -> None:
    full = f"{prefix}.{msg.name}"
    if msg.options.map_entry:
        return
    out += [f"### {full.removeprefix('.ctxd.v1.')} {{#{anchor(full)}}}", ""]
    if text := c.at(*path):
        out += [text, ""]
    if msg.field:
        maps = {f"{full}.{n.name}": n for n in msg.nested_type if n.options.map_entry}
        out += ["| field | number | type | meaning |", "|---|---|---|---|"]
        for i, f in enumerate(msg.field):
            kind = _type_link(f)
            entry = maps.get(f.type_name)
            if entry is not None:
                kind = f"map&lt;{_type_link(entry.field[0])}, {_type_link(entry.field[1])}&gt;"
            elif f.label == f.LABEL_REPEATED:
                kind = f"repeated {kind}"
            if f.HasField("oneof_index") and not f.proto3_optional:
                kind += f" (oneof `{msg.oneof_decl[f.oneof_index].name}`)"
            elif f.proto3_optional:
                kind = f"optional {kind}"
            meaning = c.at(*path, MSG_FIELD, i) or "—"
            out.append(f"| `{f.name}` | {f.number} | {kind} | {_cell(meaning)} |")
        out.append("")
    else:
        out += ["No fields.", ""]
    for i, e in enumerate(msg.enum_type):
        _enum(out, e, full, c, (*path, MSG_ENUM, i))
    for i, n in enumerate(msg.nested_type):
        _message(out, n, full, c, (*path, MSG_NESTED, i))


def _enum(
    out: list[str], enum: pb.EnumDescriptorProto, prefix: str, c: Comments, path: tuple[int, ...]
) -> None:
    full = f"{prefix}.{enum.name}"
    out += [f"### {full.removeprefix('.ctxd.v1.')} (enum) {{#{anchor(full)}}}", ""]
    if text := c.at(*path):
        out += [text, ""]
    out += ["| value | number | meaning |", "|---|---|---|"]
    for i, v in enumerate(enum.value):
        out.append(f"| `{v.name}` | {v.number} | {_cell(c.at(*path, ENUM_VALUE, i))} |")
    out.append("")


def render(fds: pb.FileDescriptorSet | None = None) -> str:
    """The whole reference as Markdown."""
    fds = fds or descriptor_set()
    out: list[str] = []
    files = [f for f in fds.file if f.package.startswith("ctxd.")]
    for f in files:
        c = Comments(f)
        prefix = f".{f.package}"
        for si, svc in enumerate(f.service):
            full = f"{prefix}.{svc.name}"
            out += [f"## {f.package}.{svc.name} {{#{anchor(full)}}}", ""]
            out += [f"Defined in `proto/{f.name}`.", ""]
            if text := c.at(FILE_SERVICE, si):
                out += [text, ""]
            out += ["| RPC | request | response | what it does |", "|---|---|---|---|"]
            for mi, m in enumerate(svc.method):
                req = m.input_type.removeprefix(".")
                resp = m.output_type.removeprefix(".")
                stream = "stream " if m.server_streaming else ""
                out.append(
                    f"| `{m.name}` | [`{req.rsplit('.', 1)[-1]}`](#{anchor(req)}) "
                    f"| {stream}[`{resp.rsplit('.', 1)[-1]}`](#{anchor(resp)}) "
                    f"| {_cell(c.at(FILE_SERVICE, si, SERVICE_METHOD, mi))} |"
                )
            out.append("")
    for f in files:
        c = Comments(f)
        out += [f"## Messages and enums of `{f.name}`", ""]
        for i, e in enumerate(f.enum_type):
            _enum(out, e, f".{f.package}", c, (FILE_ENUM, i))
        for i, m in enumerate(f.message_type):
            _message(out, m, f".{f.package}", c, (FILE_MESSAGE, i))
    return "\n".join(out)


if __name__ == "__main__":
    print(render())
