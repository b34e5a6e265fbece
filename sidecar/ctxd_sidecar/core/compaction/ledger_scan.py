"""Finding artifacts in text, fast enough for the apply path.

Text is split on whitespace and each token is classified with anchored
patterns on the token alone (regexes over whole texts backtrack at every
word and ran at well under 1 MB/s); plain words (``deploy``, ``The``) are
skipped before any pattern runs. Artifacts spanning words (``HTTP 503``,
``exit code 137``, ``order 4471``) are looked for only in a small window
around short digit tokens; their words are joined by single spaces.
Commands come from fenced shell blocks, ``$ `` lines and backticked spans
that start with a known program or read as a program with flags (only when
the text has such marks).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any

#: Longest token classified (longer ones are split at punctuation and each
#: piece cut to this: minified JSON, base64 blobs and the like).
MAX_TOKEN_CHARS = 1024
#: Words on each side of a short digit token searched for a multi-word artifact.
WINDOW_WORDS = 3

_URL = re.compile(r"(?:https?|ftp|s3|gs|wss?|ssh|git|file)://[^\s<>\"'`\\\[\](){}|]+")
_UUID = re.compile(r"[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")
_EXT = frozenset(
    "py pyi js mjs cjs ts tsx jsx go rs java kt c h cc cpp hpp rb php sh bash zsh ps1 yaml yml "
    "json jsonl toml ini cfg conf md rst txt csv tsv sql html css scss lock log env xml proto tf "
    "tfvars gradle mk vue svelte swift lua pl ex exs erl scala dart ipynb pem crt key service "
    "timer patch diff gz tgz zip tar whl db sqlite parquet".split()
)
_NAMES = frozenset(
    {"Dockerfile", "Makefile", "Jenkinsfile", "Procfile", "Gemfile", "Vagrantfile", "Containerfile"}
)
_PATH_CHARS = re.compile(r"[\w.@+%~/-]+")
_BARE = re.compile(r"[\w-]+(?:\.[\w-]+)*\.([A-Za-z0-9]{1,8})")
_ERRNO = frozenset(
    "ENOENT EACCES EPERM EEXIST ENOTDIR EISDIR EINVAL ENOSPC EROFS EMFILE ENFILE EPIPE EAGAIN "
    "EWOULDBLOCK EINTR EBADF EBUSY EADDRINUSE EADDRNOTAVAIL ECONNREFUSED ECONNRESET ECONNABORTED "
    "ETIMEDOUT EHOSTUNREACH ENETUNREACH ENOTCONN ENOMEM E2BIG ENOTEMPTY EXDEV ELOOP ENAMETOOLONG "
    "ENOEXEC ECHILD ESRCH EIO ENXIO EFAULT ENOTSUP EOPNOTSUPP EPROTO EDQUOT ERANGE EDEADLK ENOSYS "
    "ESTALE SIGKILL SIGTERM SIGSEGV SIGABRT SIGINT SIGHUP SIGPIPE SIGBUS SIGILL SIGFPE SIGQUIT "
    "OOMKilled CrashLoopBackOff ImagePullBackOff ErrImagePull".split()
)
_ERROR = re.compile(r"E\d{3,5}|[A-Z]{2,4}\d{4}|[A-Z][A-Za-z0-9]+(?:Error|Exception)")
_TICKET = re.compile(r"[A-Z][A-Z0-9]{1,9}(?:-[A-Z0-9]{1,12})*-\d{2,12}")
_NOT_TICKETS = frozenset({"UTF-16", "UTF-32", "SHA-256", "SHA-512", "ISO-8601", "ISO-8859"})
_HASH = re.compile(r"(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,64}")
_PREFIXED = re.compile(r"(?=[A-Za-z_]*\d)[a-z][a-z0-9]*_[A-Za-z0-9_]{3,}")
_REF = re.compile(r"#\d{2,12}")
_SPLIT = re.compile(r"[\"'`()\[\]{}<>,;|=\\*]+")

_HTTP_STATUS = re.compile(
    r"(?i)\b(?:HTTP(?:/\d(?:\.\d)?)?|status(?: code)?)\s*[:=]?\s*[45]\d\d\b"
    r"|\b[45]\d\d (?:Internal Server Error|Bad Gateway|Service Unavailable|Gateway Timeout|"
    r"Not Found|Forbidden|Unauthorized|Bad Request|Too Many Requests|Conflict|Not Implemented)\b"
)
_EXIT = re.compile(r"(?i)\bexit (?:code|status) \d{1,3}\b")
_CONTEXT_NUMBER = re.compile(
    r"(?i)\b(?:order|ticket|invoice|issue|case|incident|build|job|run|pr|account|customer)"
    r"\s*(?:no\.?|number|id)?\s*[:=]?\s*#?(\d{3,4})\b"
)

PROGRAMS = frozenset(
    "git python python3 pip pip3 uv poetry npm npx yarn pnpm node deno bun go cargo rustc make "
    "cmake docker podman kubectl helm terraform ansible ls cd cat grep rg sed awk curl wget ssh "
    "scp rsync tar unzip psql mysql redis-cli sqlite3 systemctl journalctl sudo apt apt-get brew "
    "pytest ruff mypy black tox chmod chown mkdir rm cp mv ln find tail head less echo export "
    "aws gcloud az ps kill pkill top du df jq yq nc ping dig nslookup openssl gh java mvn "
    "gradle dotnet bash sh zsh env source touch diff patch".split()
)
_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_SHELL_LANGS = frozenset({"sh", "bash", "shell", "console", "zsh", "terminal", "shell-session"})
_TICK = re.compile(r"`([^`\n]{2,400})`")
_PROMPT_LINE = re.compile(r"(?m)^[ \t]*\$ (.+)$")
#: A backticked span shaped like a command line: a lower-case program name
#: and a flag (``wc -l data.csv``, ``mytool --dry-run``).
_FLAGGED = re.compile(r"[a-z][\w.+-]*(?: [\w./=:+-]+)* --?[A-Za-z]")


def text_artifacts(text: str, commands: bool = False) -> Iterator[tuple[str, str]]:
    """(kind, text) found in ``text``, in order of appearance (commands first)."""
    if not text:
        return
    if commands:
        yield from (("command", c) for c in text_commands(text))
    seen: set[str] = set()  # a repeated token adds nothing new to one text
    if _dense(text):
        tokens = text.split()
        items: Iterator[tuple[str, Any]] = ((t, i) for i, t in enumerate(tokens))

        def context(i: int) -> tuple[list[str], list[str]]:
            return tokens[max(0, i - WINDOW_WORDS) : i], tokens[i + 1 : i + 1 + WINDOW_WORDS]
    else:
        items = ((text[a:b], (a, b)) for a, b in _marked_tokens(text))

        def context(span: tuple[int, int]) -> tuple[list[str], list[str]]:
            a, b = span
            return text[max(0, a - 80) : a].split()[-WINDOW_WORDS:], text[b : b + 80].split()[
                :WINDOW_WORDS
            ]

    for tok, where in items:
        if (tok.isalpha() and (tok.islower() or tok.istitle()) and tok not in _NAMES) or (
            tok in seen
        ):
            continue
        seen.add(tok)
        if len(tok) > MAX_TOKEN_CHARS:  # minified JSON, blobs: cut each piece instead
            for piece in _SPLIT.split(tok):
                if piece:
                    yield from _token(piece[:MAX_TOKEN_CHARS])
            continue
        yield from _token(tok)
        core = tok.strip(".,;:!?()[]{}\"'#")
        if core.isascii() and core.isdigit() and len(core) <= 4:
            before, after = context(where)
            if _triggered(before, after):
                seen.discard(tok)  # the same number may follow other words elsewhere
                yield from _window(before, tok, after)


def _dense(text: str) -> bool:
    """Marks in more than 1 of 40 characters of the text's start (logs, JSON):
    splitting every token is then cheaper than searching marks. Both paths
    find the same artifacts, so the sample is kept short: counting marks in
    it costs as much per character as the scan itself."""
    sample = text[:512]
    return len(_MARK.findall(sample)) * 40 > len(sample)


#: A character no plain word has (a dot only before a word character), or a
#: name that is a path by itself. A capital letter starting a plain
#: title-case word (``The``, most sentences' first word) is no mark: such a
#: word is never an artifact, and prose has one every sentence.
_MARK = re.compile(
    r"[^\sa-zA-Z.,;:!?'\"()\-]|\.\w|[A-Z](?![a-z]*(?:[\s.,;:!?'\"()\-]|$))|"
    + "|".join(sorted(_NAMES))
)


def _marked_tokens(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of the whitespace-separated tokens with a :data:`_MARK`.
    Prose is skipped by C-level searches, not a Python loop per word or char."""
    pos = 0
    while True:
        m = _MARK.search(text, pos)
        if m is None:
            return
        p = m.start()
        start = max(text.rfind(" ", pos, p), text.rfind("\n", pos, p), text.rfind("\t", pos, p))
        start = max(start + 1, pos)
        end = _REST.match(text, m.end()).end()
        yield start, end
        pos = end


_REST = re.compile(r"\S*")


def _token(tok: str) -> Iterator[tuple[str, str]]:
    if "://" in tok:
        for m in _URL.finditer(tok):
            yield "url", m.group().rstrip(".,;:!?")
        tok = _URL.sub(" ", tok)
    for piece in _SPLIT.split(tok):
        for sub in piece.split():
            yield from _piece(sub)


def _piece(s: str) -> Iterator[tuple[str, str]]:
    s = s.rstrip(".,:!?").lstrip(":!?")
    if not s:
        return
    kind = classify(s)
    if kind is not None:
        yield kind, s
    elif ":" in s:  # app.py:42, error:E0308
        for part in s.split(":"):
            part = part.rstrip(".")
            kind = classify(part) if part else None
            if kind is not None:
                yield kind, part


@functools.lru_cache(maxsize=16384)
def classify(s: str) -> str | None:
    """The kind of one token (no surrounding punctuation), or ``None``."""
    if "/" in s:
        return "path" if _PATH_CHARS.fullmatch(s) and path_like(s) else None
    if s in _NAMES:
        return "path"
    if "." in s:
        m = _BARE.fullmatch(s)
        return "path" if m and m.group(1) in _EXT else None
    if s in _ERRNO or _ERROR.fullmatch(s):
        return "error"
    if len(s) == 36 and _UUID.fullmatch(s):
        return "id"
    if _TICKET.fullmatch(s):
        return None if s in _NOT_TICKETS else "id"
    if _HASH.fullmatch(s) or _PREFIXED.fullmatch(s) or _REF.fullmatch(s):
        return "id"
    if len(s) >= 5 and s.isascii() and s.isdigit():
        return "number"
    return None


def path_like(token: str) -> bool:
    """A token with a slash that names a file or directory, not ``and/or``."""
    if not any(c.isalpha() for c in token):
        return False
    if token.startswith(("/", "~", "./", "../")):
        return len(token) > 1
    last = token.rstrip("/").rsplit("/", 1)[-1]
    ext = last[1:].rsplit(".", 1)[1] if "." in last[1:] else ""
    return any(c.isalpha() for c in ext) or token.count("/") >= 2


_TRIGGERS = frozenset(
    "http status code exit order ticket invoice issue case incident build job run pr account "
    "customer no no. number id".split()
)
_REASONS = frozenset("Internal Bad Service Gateway Not Forbidden Unauthorized Too Conflict".split())


def _triggered(before: list[str], after: list[str]) -> bool:
    """A word that can start a multi-word artifact is next to the digits."""
    if after and after[0] in _REASONS:
        return True
    for t in before:
        w = t.casefold().rstrip(":=#")
        if w in _TRIGGERS or w.startswith("http/"):
            return True
    return False


def _window(before: list[str], tok: str, after: list[str]) -> Iterator[tuple[str, str]]:
    head = " ".join(before)
    offset = len(head) + (1 if head else 0)
    window = " ".join([*before, tok, *after])
    for kind, pattern in (("error", _HTTP_STATUS), ("error", _EXIT), ("number", _CONTEXT_NUMBER)):
        for m in pattern.finditer(window):
            group = 1 if pattern.groups else 0
            if m.start(group) <= offset < m.end(group):
                yield kind, m.group(group)


def text_commands(text: str) -> Iterator[str]:
    """Shell commands written in ``text`` (fenced blocks, ``$`` lines, backticks)."""
    if "```" in text:
        for m in _FENCE.finditer(text):
            lang, body = m.group(1).lower(), m.group(2)
            for line in body.splitlines():
                line = line.strip()
                if line.startswith(("$ ", "> ")):
                    yield line[2:].strip()
                elif (lang in _SHELL_LANGS and lang != "console") or (not lang and program(line)):
                    if line and not line.startswith("#"):
                        yield line
        text = _FENCE.sub(" ", text)
    if "$ " in text:
        for m in _PROMPT_LINE.finditer(text):
            yield m.group(1).strip()
    if "`" in text:
        for m in _TICK.finditer(text):
            span = m.group(1).strip()
            if span.startswith("$ "):
                yield span[2:].strip()
            elif " " in span and (program(span) or _FLAGGED.match(span)):
                yield span


def program(line: str) -> bool:
    """``line`` starts with a known program name."""
    first = line.split(None, 1)[0] if line.strip() else ""
    return first.rsplit("/", 1)[-1] in PROGRAMS
