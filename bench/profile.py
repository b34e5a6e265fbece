"""Where a ctxd call spends its time: ``python -m bench.profile WORKLOAD``.

Starts the same child sidecar the benchmarks use (``bench.ctxd_server`` on
LMDB with fsync), drives one workload against it from this process, records
the child with py-spy (``pip install -e '.[bench]'``) and prints:

* the event loop's samples: how many it was busy (not waiting in epoll),
  and of those how many were in ctxd's own frames (``sidecar/``,
  ``plugins/`` and what they call) rather than gRPC and asyncio, per call;
* the samples the LMDB writer thread spent committing, per call;
* the heaviest ctxd frames on the event loop, inclusive and self.

Workloads: ``get`` (Memory.Get of one key), ``set`` (Memory.Set of a new key),
``append`` (AppendTurn of a 1 KB user + 1 KB assistant message, with an
idempotency key, as the throughput benchmark sends it), ``turn`` (that
AppendTurn, then the incremental GetContext a runtime makes next). Figures
from py-spy are samples, not wall time: profiling slows the child, so read
shares, not microseconds. The raw samples are kept (``--raw``) for a flame graph.

With ``--gil`` py-spy samples only the thread holding the GIL, so samples
divided by the rate are GIL time: the report adds the microseconds each call
held it, the figure that bounds a Python server's throughput (one GIL per
process). Sample slowly for it (``--rate 200``): at high rates py-spy's
pauses slow the child more than they tell.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from bench.procs import python_module_cmd, spawn

WORKLOADS = ("get", "set", "append", "turn")
#: The event loop waiting for work (its innermost Python frame).
_IDLE = ("EpollSelector.select", "epoll_wait")
_LOOP = "run_forever"
_COMMIT = "_commit (ctxd_plugins/lmdb_store.py"
_OURS = ("ctxd_sidecar/", "ctxd_plugins/")


@dataclass
class Profile:
    """Samples of one run, grouped the way the printout reads them."""

    total: int = 0
    calls: int = 0
    #: Samples per second, and whether only the GIL holder was sampled.
    rate: int = 0
    gil: bool = False
    loop: int = 0
    loop_busy: int = 0
    loop_ours: int = 0
    commit: int = 0
    inclusive: collections.Counter = field(default_factory=collections.Counter)
    own: collections.Counter = field(default_factory=collections.Counter)


def _ours(frame: str) -> bool:
    return frame.rpartition(" (")[2].startswith(_OURS)


def aggregate(lines: Iterable[str], calls: int, rate: int = 0, gil: bool = False) -> Profile:
    """Fold py-spy ``--format raw`` lines (``frame;frame;... count``)."""
    out = Profile(calls=calls, rate=rate, gil=gil)
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        out.total += n
        if not any(_LOOP in f for f in frames):
            if any(_COMMIT in f for f in frames):
                out.commit += n
            continue
        out.loop += n
        python = [f for f in frames if not f.startswith("0x")]
        if python and any(w in python[-1] for w in _IDLE):
            continue
        out.loop_busy += n
        first_ours = next((i for i, f in enumerate(frames) if _ours(f)), None)
        if first_ours is None:
            continue
        out.loop_ours += n
        below = frames[first_ours:]
        out.own[below[-1]] += n
        for f in set(below):
            out.inclusive[f] += n
    return out


def report(p: Profile, top: int = 25) -> str:
    calls = max(p.calls, 1)
    busy = max(p.loop_busy, 1)
    rows = [
        f"{p.total} samples, {p.calls} calls",
        f"event loop: busy {p.loop_busy / max(p.loop, 1):.0%} of its {p.loop} samples; "
        f"{p.loop_busy / calls:.3f} busy samples per call, of which ctxd code "
        f"{p.loop_ours / calls:.3f} ({p.loop_ours / busy:.0%}), gRPC and asyncio the rest",
        f"LMDB writer committing: {p.commit / calls:.3f} samples per call",
    ]
    if p.gil and p.rate:
        per_call = 1e6 / p.rate / calls  # microseconds one sample stands for, per call
        rows.append(
            f"GIL held: {p.total * per_call:.0f} us per call, {p.loop_busy * per_call:.0f} us "
            f"of it on the event loop, {p.loop_ours * per_call:.0f} us in ctxd code"
        )
    rows.append("ctxd frames on the event loop, inclusive (share of its busy samples):")
    rows += [f"  {n / busy:6.1%}  {f[:110]}" for f, n in p.inclusive.most_common(top)]
    rows.append("ctxd frames, self:")
    rows += [f"  {n / busy:6.1%}  {f[:110]}" for f, n in p.own.most_common(top // 2)]
    return "\n".join(rows)


# -- workloads ------------------------------------------------------------------------
def _workload(name: str, port: str, caller: int = 0) -> Callable[[], object]:
    import grpc

    from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
    from ctxd_sidecar.api.ctxd.v1 import context_pb2_grpc, memory_pb2, memory_pb2_grpc

    channel = grpc.insecure_channel(f"127.0.0.1:{int(port)}")
    grpc.channel_ready_future(channel).result(timeout=20)
    if name in ("get", "set"):
        stub = memory_pb2_grpc.MemoryServiceStub(channel)
        value = '{"user":"ada","lang":"en","tz":"Europe/London","tags":["a","b"]}'
        stub.Set(memory_pb2.SetRequest(key="profile/get", value_json=value), timeout=10)
        if name == "get":
            req = memory_pb2.GetRequest(key="profile/get")
            return lambda: stub.Get(req, timeout=10)
        counter = itertools.count()
        return lambda: stub.Set(
            memory_pb2.SetRequest(key=f"profile/set/{next(counter)}", value_json=value), timeout=10
        )
    contexts = context_pb2_grpc.ContextServiceStub(channel)
    text = ("lorem ipsum dolor sit amet " * 40)[:1024]
    pair = [
        pb.Message(user=pb.UserMessage(text=text)),
        pb.Message(assistant=pb.AssistantMessage(text=text)),
    ]
    cid = f"profile-{caller}"  # one conversation per caller, as runtimes have
    held = [contexts.AppendTurn(pb.AppendTurnRequest(context_id=cid, messages=pair)).version]
    if name == "append":
        keys = itertools.count()
        return lambda: contexts.AppendTurn(
            pb.AppendTurnRequest(context_id=cid, messages=pair, idempotency_key=f"k{next(keys)}"),
            timeout=10,
        )

    def turn() -> None:
        contexts.AppendTurn(pb.AppendTurnRequest(context_id=cid, messages=pair), timeout=10)
        read = pb.GetContextRequest(
            context_id=cid, view=pb.CONTEXT_VIEW_SLICE, since_version=held[0]
        )
        held[0] = contexts.GetContext(read, timeout=10).info.version

    return turn


def run(
    workload: str,
    seconds: int,
    rate: int,
    native: bool,
    raw: str | None,
    callers: int = 1,
    gil: bool = False,
) -> Profile:
    spy = shutil.which("py-spy")
    if spy is None:
        raise SystemExit("py-spy is not installed: pip install -e '.[bench]'")
    with tempfile.TemporaryDirectory(prefix="ctxd-profile-") as data:
        cmd = python_module_cmd(
            "bench.ctxd_server",
            "--store",
            f"lmdb://{data}/store?map_size=1GiB",
            "--set",
            "contexts.auto_compact=false",
        )
        with spawn(cmd) as (proc, port):
            each = [_workload(workload, port, i) for i in range(callers)]
            for call in each:
                for _ in range(200 // callers + 1):  # warm the channel and the code paths
                    call()
            out = raw or f"{data}/samples.raw"
            args = [spy, "record", "-p", str(proc.pid), "-d", str(seconds), "-r", str(rate)]
            args += ["-f", "raw", "-o", out] + (["--native"] if native else [])
            args += ["--gil"] if gil else []
            stop = threading.Event()
            calls = [0] * callers

            def drive(i: int) -> None:
                while not stop.is_set():
                    each[i]()
                    calls[i] += 1

            drivers = [
                threading.Thread(target=drive, args=(i,), daemon=True) for i in range(callers)
            ]
            started = time.monotonic()
            recorder = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            for d in drivers:
                d.start()
            _, err = recorder.communicate(timeout=seconds + 60)
            stop.set()
            for d in drivers:
                d.join(timeout=10)
            if recorder.returncode != 0:
                raise SystemExit(f"py-spy failed: {err.decode(errors='replace').strip()[:300]}")
            # Calls made while py-spy was sampling (it starts within a moment).
            made = int(sum(calls) * min(1.0, seconds / max(time.monotonic() - started, 1e-9)))
            with open(out) as fh:
                return aggregate(fh, made, rate, gil)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.profile", description=__doc__.splitlines()[0]
    )
    ap.add_argument("workload", choices=WORKLOADS)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--rate", type=int, default=997, help="samples per second")
    ap.add_argument("--callers", type=int, default=1, help="concurrent callers (threads)")
    ap.add_argument("--native", action="store_true", help="include C frames (slower)")
    ap.add_argument("--raw", metavar="PATH", help="keep py-spy's raw samples here")
    ap.add_argument(
        "--gil", action="store_true", help="sample only the GIL holder; report GIL time per call"
    )
    args = ap.parse_args(argv)
    if args.callers < 1 or args.seconds < 1 or args.rate < 1:
        ap.error("--callers, --seconds and --rate must be at least 1")
    profile = run(
        args.workload, args.seconds, args.rate, args.native, args.raw, args.callers, args.gil
    )
    print(report(profile))
    return 0


if __name__ == "__main__":
    sys.exit(main())
