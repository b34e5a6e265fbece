"""ctxd compaction: PlanCompaction + ApplyCompaction on LMDB, model excluded.

A real sidecar runs in this process on its own event loop thread (LMDB,
fsync on every commit) and is called over gRPC on loopback. The context is
built to ``mark`` estimated tokens with large multi-message turns (user and
assistant messages of :data:`MESSAGE_CHARS` characters, alternating), then
one sample is:

1. ``PlanCompaction(keep_last=12)`` (cut, excerpt of everything folded, plan_ref);
2. ``ApplyCompaction`` with a canned JSON answer (what a runtime's model
   would send; the model's own time is not part of ctxd's cost).

Between samples the context is grown back to the mark (untimed).

Rows (p50/p99 in µs): ``ctxd.compaction.plan_apply.lmdb.100k`` and
``.1m``; targets ≤ 20 ms and ≤ 200 ms (in each row's ``extra``).
"""

from __future__ import annotations

import asyncio
import gc
import json
import threading
import time
from collections.abc import Iterator

import grpc

from bench.harness import Context, Result, register, result_from_samples

GROUP = "compaction"
#: Characters of one built message (~4,000 estimated tokens).
MESSAGE_CHARS = 16_000
#: Messages per AppendTurn while building (keeps requests under 2 MB).
BUILD_TURN = 100
TARGETS_MS = {100_000: 20.0, 1_000_000: 200.0}
ANSWER = json.dumps(
    {
        "goals": ["benchmark the compaction path"],
        "decisions": ["answers are canned"],
        "open": [],
        "facts": ["the context was built with large turns"],
    }
)


def _label(mark: int) -> str:
    return f"{mark // 1_000_000}m" if mark >= 1_000_000 else f"{mark // 1000}k"


class _InProcess:
    def __init__(self, store: str) -> None:
        from ctxd_sidecar.config.loader import load_config
        from ctxd_sidecar.server.app import Sidecar

        cfg = load_config(
            env={},
            overrides={
                "store": store,
                "listen": "127.0.0.1:0",
                "contexts.auto_compact": False,
                "log_level": "warning",
            },
        )
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.sidecar = Sidecar(cfg)
        address = asyncio.run_coroutine_threadsafe(self.sidecar.start(), self.loop).result(60)
        opts = [
            ("grpc.max_receive_message_length", 64 << 20),
            ("grpc.max_send_message_length", 64 << 20),
        ]
        self.channel = grpc.insecure_channel(address, options=opts)

    def close(self) -> None:
        self.channel.close()
        try:
            asyncio.run_coroutine_threadsafe(self.sidecar.stop(grace=1), self.loop).result(60)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)


@register(GROUP)
def compaction_suite(ctx: Context) -> Iterator[Result]:
    from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
    from ctxd_sidecar.api.ctxd.v1 import context_pb2_grpc

    path = ctx.tmpdir(prefix="bench-compaction-")
    try:
        sc = _InProcess(f"lmdb://{path}")
    except Exception as exc:  # noqa: BLE001 - report, do not crash the run
        ctx.skip("ctxd.compaction", f"sidecar did not start: {exc}")
        return
    ctx.cleanup.callback(sc.close)
    stub = context_pb2_grpc.ContextServiceStub(sc.channel)
    text = "lorem ipsum dolor sit amet " * (MESSAGE_CHARS // 27)

    def msg(i: int) -> pb.Message:
        if i % 2 == 0:
            return pb.Message(user=pb.UserMessage(text=f"u{i} {text}"))
        return pb.Message(assistant=pb.AssistantMessage(text=f"a{i} {text}"))

    def grow(cid: str, mark: int) -> int:
        est = (
            stub.GetContext(
                pb.GetContextRequest(context_id=cid, view=pb.CONTEXT_VIEW_INFO)
            ).info.est_tokens
            if _exists(cid)
            else 0
        )
        while est < mark:
            want = min(BUILD_TURN, max(2, (mark - est) // (MESSAGE_CHARS // 4) + 1))
            want += want % 2
            r = stub.AppendTurn(
                pb.AppendTurnRequest(
                    context_id=cid, messages=[msg(i) for i in range(want)], model_window=10_000_000
                ),
                timeout=120,
            )
            est = r.est_tokens
        return est

    def _exists(cid: str) -> bool:
        try:
            stub.GetContext(pb.GetContextRequest(context_id=cid, view=pb.CONTEXT_VIEW_INFO))
            return True
        except grpc.RpcError:
            return False

    def settle(cid: str) -> None:
        """Let the background checkpoint the growing turns started finish, so
        the sample measures plan+apply rather than a concurrent segment write."""
        service = sc.sidecar.domain.contexts
        asyncio.run_coroutine_threadsafe(service.checkpoint_now(cid), sc.loop).result(60)

    for mark, n in ((100_000, ctx.pick(30, 5)), (1_000_000, ctx.pick(10, 3))):
        cid = f"bench-{_label(mark)}"
        samples: list[int] = []
        folded = sizes = 0
        for _ in range(n + 1):  # the first one warms up
            sizes = grow(cid, mark)
            settle(cid)
            gc.collect()
            t0 = time.perf_counter_ns()
            p = stub.PlanCompaction(
                pb.PlanCompactionRequest(context_id=cid, keep_last=12), timeout=60
            )
            a = stub.ApplyCompaction(
                pb.ApplyCompactionRequest(context_id=cid, plan_ref=p.plan_ref, answer=ANSWER),
                timeout=60,
            )
            dt = time.perf_counter_ns() - t0
            assert a.folded > 0
            folded = a.folded
            samples.append(dt)
        yield result_from_samples(
            samples[1:],
            name=f"ctxd.compaction.plan_apply.lmdb.{_label(mark)}",
            group=GROUP,
            extra={
                "est_tokens": sizes,
                "folded_messages": folded,
                "target_ms": TARGETS_MS[mark],
                "excerpt_chars": len(p.excerpt),
            },
        )


if __name__ == "__main__":
    from bench.harness import Context as _Ctx

    c = _Ctx(quick=True)
    with c.cleanup:
        for r in compaction_suite(c):
            print(
                r.name, round(r.p50 / 1000, 2), "ms p50", round(r.p99 / 1000, 2), "ms p99", r.extra
            )
