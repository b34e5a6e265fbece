"""Child-process helper for benchmarks that need a server in another process.

Servers under test run in their own process so the client and the server do
not share a GIL. ``spawn`` starts the child, waits for its first stdout line
(a ready/port announcement) and guarantees terminate + wait on exit, even when
the benchmark raises. The child's stdin is a pipe that is closed on teardown,
so a child that watches stdin for EOF also exits if this process dies hard.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def python_module_cmd(module: str, *args: str) -> list[str]:
    """``[sys.executable, "-m", module, *args]`` (same interpreter/venv as the bench)."""
    return [sys.executable, "-m", module, *args]


def _child_env(extra: Mapping[str, str] | None) -> dict[str, str]:
    env = dict(os.environ)
    pp = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + pp if pp else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    if extra:
        env.update(extra)
    return env


def _read_first_line(proc: subprocess.Popen[bytes], timeout: float) -> str:
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    buf = b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"child {proc.args!r} not ready after {timeout}s")
            if not sel.select(left):
                continue
            chunk = os.read(fd, 4096)
            if not chunk:
                rc = proc.poll()
                raise RuntimeError(
                    f"child {proc.args!r} exited (rc={rc}) before announcing readiness"
                )
            buf += chunk
    return buf.split(b"\n", 1)[0].decode().strip()


def _drain(stream) -> None:  # keep the child from blocking on a full stdout pipe
    try:
        while stream.read(65536):
            pass
    except (OSError, ValueError):
        pass


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
    """Close stdin, SIGTERM, wait; SIGKILL + wait if it does not exit in time."""
    if proc.stdin is not None:
        with contextlib.suppress(OSError):
            proc.stdin.close()
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()


@contextlib.contextmanager
def spawn(
    cmd: Sequence[str],
    *,
    ready_timeout: float = 20.0,
    stop_timeout: float = 5.0,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """Start ``cmd``; yield ``(proc, first_stdout_line)`` once it printed a line.

    The repo root is put on the child's ``PYTHONPATH`` so ``python -m bench.x``
    works from any cwd. stderr is inherited. Teardown always runs.
    """
    proc = subprocess.Popen(
        list(cmd),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=_child_env(env),
        cwd=str(cwd) if cwd is not None else str(REPO_ROOT),
    )
    drain: threading.Thread | None = None
    try:
        line = _read_first_line(proc, ready_timeout)
        drain = threading.Thread(target=_drain, args=(proc.stdout,), daemon=True)
        drain.start()
        yield proc, line
    finally:
        stop_process(proc, stop_timeout)
        if drain is not None:
            drain.join(timeout=2.0)
        if proc.stdout is not None and (drain is None or not drain.is_alive()):
            with contextlib.suppress(OSError):
                proc.stdout.close()
