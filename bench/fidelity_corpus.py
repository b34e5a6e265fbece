"""A seeded corpus of long, tool-heavy agent sessions with planted artifacts.

Three shapes, drawn in turn: **coding** (read files, run tests, patch, commit),
**ops** (pods, logs, metrics, restarts) and **research** (search, fetch pages,
extract tables). A session is a list of batches (one per compaction); a batch
is rounds of user request → assistant tool call(s) → tool result(s) →
assistant reply. Tool results are the bulk of the text: log lines, JSON
records, page extracts, as real tools return them.

Artifacts are planted where they occur in real sessions, and every planted
one is recorded with its kind (``path``, ``command``, ``url``, ``id``,
``number``, ``error``, ``tool``): paths in requests, tool arguments and
stack traces; commands as tool arguments and in backticks in replies; URLs
in requests, search results and replies; ids as tickets, commit hashes,
UUIDs and request ids; numbers (5+ digits: order numbers, byte and row
counts) in prose, JSON values and log lines; error codes as exception names,
compiler codes, HTTP statuses, errno names and exit codes; tool calls by the
tool's name. Results also carry unplanted text (timestamps, latencies,
short numbers, ordinary words) that competes for the same space. Nothing
here reads ctxd's extractor: the vocabulary is the shapes', fixed before the
ledger was measured on it.

``corpus(n, seed)`` is deterministic: the same ``n`` and ``seed`` give the
same sessions, byte for byte.
"""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass, field

SHAPES = ("coding", "ops", "research")
KINDS = ("path", "url", "command", "tool", "id", "number", "error")
BATCHES = 5
ROUNDS = 6

_WORDS = (
    "billing invoice ledger auth session cache queue worker report export import schema "
    "payment refund customer order search index upload storage gateway router scheduler "
    "notify metrics audit config parser render client server token retry backoff"
).split()
_FILLER = (
    "The change looks small but it touches the request path, so I will keep it narrow",
    "Nothing else in the output stands out; the rest is routine",
    "I checked the neighbouring code as well and it follows the same pattern",
    "That matches what the earlier run showed, with the same timings within noise",
    "Most of the output is the usual start-up noise and can be ignored",
    "The configuration on the other hosts is the same, so this is not a local drift",
)


@dataclass
class Message:
    kind: str  # user | assistant | tool
    text: str = ""
    #: (call id, tool name, arguments JSON) of an assistant's tool calls.
    calls: list[tuple[str, str, str]] = field(default_factory=list)
    call_id: str = ""
    name: str = ""
    content: str = ""
    is_error: bool = False
    #: (kind, text) of the artifacts planted in this message.
    planted: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Session:
    shape: str
    seed: int
    batches: list[list[Message]]


class _Gen:
    """Draws the artifacts and sentences of one session."""

    def __init__(self, rng: random.Random, shape: str) -> None:
        self.rng = rng
        self.shape = shape
        self.calls = 0
        self.org = rng.choice(["acme", "globex", "initech", "umbrella", "hooli"])
        self.proj = rng.choice(["BILL", "OPS", "PLAT", "INFRA", "DATA", "WEB"])
        self.svc = rng.choice(_WORDS)

    def word(self) -> str:
        return self.rng.choice(_WORDS)

    def num(self, lo: int = 10_000, hi: int = 99_999_999) -> str:
        return str(self.rng.randint(lo, hi))

    def hexid(self, n: int = 10) -> str:
        return "".join(self.rng.choice("0123456789abcdef") for _ in range(n - 1)) + "7"

    def path(self) -> str:
        r, w = self.rng, self.word()
        if self.shape == "coding":
            return r.choice(
                [f"src/{w}/{self.word()}_{r.randint(1, 99)}.py", f"tests/test_{w}.py",
                 f"web/src/{w}/{self.word().title()}View.tsx", f"internal/{w}/{self.word()}.go"]
            )  # fmt: skip
        if self.shape == "ops":
            return r.choice(
                [f"/etc/{w}/{self.word()}.conf", f"/var/log/{w}/{self.word()}.log",
                 f"deploy/k8s/{w}-{self.word()}.yaml", f"/opt/{w}/bin/{self.word()}.sh"]
            )  # fmt: skip
        return r.choice(
            [f"notes/{w}-{self.word()}.md", f"data/{w}_{r.randint(2015, 2026)}.csv",
             f"scripts/fetch_{w}.py", f"papers/{w}-{self.word()}.pdf"]
        )  # fmt: skip

    def url(self) -> str:
        r, w = self.rng, self.word()
        if self.shape == "coding":
            return f"https://github.com/{self.org}/{w}/pull/{r.randint(100, 9999)}"
        if self.shape == "ops":
            board = self.hexid(8)
            return f"https://grafana.{self.org}.net/d/{board}/{w}?from=now-{r.randint(1, 48)}h"
        return r.choice(
            [f"https://arxiv.org/abs/{r.randint(18, 25)}{r.randint(1, 12):02d}."
             f"{r.randint(10000, 29999)}",
             f"https://doi.org/10.{r.randint(1000, 9999)}/{w}.{r.randint(100, 999)}",
             f"https://en.wikipedia.org/wiki/{w.title()}_{self.word()}"]
        )  # fmt: skip

    def command(self, path: str) -> str:
        r, w = self.rng, self.word()
        if self.shape == "coding":
            return r.choice(
                [f"pytest {path} -k {w} -x", f"git checkout -b fix/{w}-{r.randint(10, 999)}",
                 f"ruff check {path}", f"go test ./internal/{w}/... -run Test{w.title()}",
                 f"npm run build -- --filter {w}"]
            )  # fmt: skip
        if self.shape == "ops":
            return r.choice(
                [f"kubectl -n {w} rollout restart deploy/{self.svc}-{w}",
                 f"journalctl -u {self.svc}.service --since -{r.randint(5, 90)}m",
                 f"systemctl restart {w}-{self.svc}", f"tail -n 200 {path}",
                 f"kubectl logs deploy/{w} --since={r.randint(1, 30)}m"]
            )  # fmt: skip
        return r.choice(
            [f"python {path} --year {r.randint(2015, 2026)}",
             f"curl -sL {self.url()} -o data/{w}.html",
             f"jq '.items[] | .{w}' data/{w}.json", f"wc -l data/{w}_{r.randint(2015, 2026)}.csv"]
        )  # fmt: skip

    def ident(self) -> str:
        r = self.rng
        return r.choice(
            [f"{self.proj}-{r.randint(100, 9999)}", self.hexid(r.choice([7, 10, 12])),
             str(uuid.UUID(int=r.getrandbits(128), version=4)), f"req_{self.hexid(12)}"]
        )  # fmt: skip

    def error(self) -> str:
        r = self.rng
        if self.shape == "coding":
            return r.choice(
                [f"TS{r.randint(1000, 7999)}", f"E0{r.randint(100, 799)}",
                 f"{self.word().title()}Error", r.choice(["KeyError", "ValueError", "TypeError"])]
            )  # fmt: skip
        if self.shape == "ops":
            return r.choice(
                ["CrashLoopBackOff", "OOMKilled", "ECONNREFUSED", "ETIMEDOUT",
                 f"HTTP {r.choice([500, 502, 503, 504])}",
                 f"exit code {r.choice([1, 2, 137, 143])}"]
            )  # fmt: skip
        return r.choice([f"HTTP {r.choice([403, 404, 429, 500])}", "ConnectionError", "ETIMEDOUT"])

    def filler(self, n: int = 1) -> str:
        return " ".join(self.rng.choice(_FILLER) + "." for _ in range(n))

    def log_lines(self, n: int) -> list[str]:
        r = self.rng
        return [
            f"2026-12-0{r.randint(1, 4)} {r.randint(0, 23):02d}:{r.randint(0, 59):02d}:"
            f"{r.randint(0, 59):02d} {r.choice(['INFO', 'INFO', 'DEBUG', 'WARN'])} "
            f"{self.word()}: handled {self.word()} in {r.randint(2, 900)}ms "
            f"({r.randint(1, 64)} items)"
            for _ in range(n)
        ]

    def call_id(self) -> str:
        self.calls += 1
        return f"call_{self.calls:03d}{self.hexid(6)}"


_TOOLS = {
    "coding": (("read_file", "path"), ("run_command", "command"), ("apply_patch", "path")),
    "ops": (("kubectl", "command"), ("fetch_logs", "path"), ("query_metrics", "dashboard")),
    "research": (("web_search", "query"), ("fetch_page", "url"), ("run_script", "command")),
}
_ASKS = {
    "coding": (
        "Can you look at {path}? {ticket} says the {w} step fails on main.",
        "Next, fix the {w} handling in {path} for {ticket}.",
        "Please check why {path} breaks the build; see {url}.",
    ),
    "ops": (
        "The {w} service is paging again ({ticket}). Start with {path}.",
        "Check {url}; latency for {w} doubled since this morning.",
        "Customers report failed {w} calls, ticket {ticket}. Look at {path} please.",
    ),
    "research": (
        "Find sources on {w} adoption; start from {url}.",
        "Compare the {w} figures in {path} with the survey in {url}.",
        "Summarise what {ticket} asks about {w} and save notes to {path}.",
    ),
}


def _tool_call(g: _Gen, name: str, key: str, path: str, msg: Message) -> str:
    """Arguments of one call (its artifacts planted in ``msg``); returns the JSON."""
    args: dict[str, object] = {}
    if key == "command":
        cmd = g.command(path)
        args["command"] = cmd
        msg.planted.append(("command", cmd))
    elif key == "path":
        args = {"path": path, "start": g.rng.randint(1, 400)}
        msg.planted.append(("path", path))
    elif key in ("url", "dashboard"):
        url = g.url()
        args[key] = url
        msg.planted.append(("url", url))
    else:
        args[key] = f"{g.word()} {g.word()} {g.rng.randint(2019, 2026)}"
    msg.planted.append(("tool", name))
    return json.dumps(args)


def _result(g: _Gen, call_id: str, name: str) -> Message:
    r = g.rng
    out = Message("tool", call_id=call_id, name=name)
    number, ident, err = g.num(), g.ident(), g.error()
    lines = g.log_lines(r.randint(8, 30))
    if r.random() < 0.4:  # a JSON record, as an API tool returns it
        status = "error" if r.random() < 0.5 else "ok"
        items = [{"name": g.word(), "ms": r.randint(1, 900)} for _ in range(r.randint(3, 12))]
        record = {"id": ident, "status": status, "count": int(number), "error": err}
        record["items"] = items
        if g.shape == "research":
            url = g.url()
            record["source"] = url
            out.planted.append(("url", url))
        out.content = json.dumps(record, indent=2)
    else:
        lines.insert(r.randrange(len(lines)), f"ERROR {g.word()}: {err} while processing "
                     f"{g.word()} {ident} ({number} bytes)")  # fmt: skip
        if g.shape == "coding" and r.random() < 0.5:
            p = g.path()
            lines.append(f'  File "{p}", line {r.randint(1, 900)}, in {g.word()}')
            out.planted.append(("path", p))
        out.content = "\n".join(lines)
        out.is_error = r.random() < 0.2
    out.planted += [("number", number), ("id", ident), ("error", err)]
    return out


def _round(g: _Gen) -> list[Message]:
    r = g.rng
    path, ticket, url = g.path(), g.ident(), g.url()
    ask = r.choice(_ASKS[g.shape]).format(path=path, ticket=ticket, url=url, w=g.word())
    user = Message("user", text=ask)
    user.planted += [(k, v) for k, v in (("path", path), ("id", ticket), ("url", url))
                     if v in ask]  # fmt: skip
    out = [user]
    tools = list(_TOOLS[g.shape])
    r.shuffle(tools)
    for name, key in tools[: r.choice((1, 1, 2))]:
        call = Message("assistant", text=r.choice(["", "", g.filler()]))
        cid = g.call_id()
        call.calls.append((cid, name, _tool_call(g, name, key, path, call)))
        out += [call, _result(g, cid, name)]
    reply = Message("assistant")
    seen = [a for m in out if m.kind == "tool" for a in m.planted]
    err = next(t for k, t in seen if k == "error")
    number = next(t for k, t in seen if k == "number")
    text = f"The {g.word()} step failed with {err}; {number} records were affected. {g.filler(2)}"
    reply.planted += [("error", err), ("number", number)]
    if r.random() < 0.5:
        cmd = g.command(path)
        text += f" Next I will run `{cmd}` to confirm the fix."
        reply.planted.append(("command", cmd))
    reply.text = text
    return out + [reply]


def session(seed: int, shape: str, batches: int = BATCHES, rounds: int = ROUNDS) -> Session:
    g = _Gen(random.Random(f"{shape}-{seed}"), shape)
    return Session(
        shape, seed, [[m for _ in range(rounds) for m in _round(g)] for _ in range(batches)]
    )


def corpus(n: int, seed: int = 41, batches: int = BATCHES, rounds: int = ROUNDS) -> list[Session]:
    """``n`` sessions, the shapes in turn."""
    return [session(seed * 100_000 + i, SHAPES[i % 3], batches, rounds) for i in range(n)]
