"""Benchmark (docs/performance.md, target 5): does a worker's memory grow with the approval cycles it serves?

One process does what a web worker with eager tasks does for each cycle of the peers' scenario
(../shared/peers): `chat_send` "cancel order X" (the run pauses for the requester's confirmation),
then `chat_send` with the one-time token (the decision commits, the run resumes, cancel_order runs
once, the model answers). The user is loaded afresh for every request, as the auth layer does.

Resident memory (VmRSS of /proc/self/status, in MB) is read after a warm-up and then every
`--every` cycles; the figure to judge is the growth from the warm-up to the end (target: under
20 MB after 10,000 cycles). Python's own heap (tracemalloc is not used: it slows every allocation)
is summarised by `gc.get_objects()` counts at the same points, so a leak of Python objects shows
beside the RSS.

Usage: DATABASE_URL=postgres://postgres@127.0.0.1:5432/ap_bench python bench/memory_growth.py
       [--cycles 10000] [--warmup 200] [--every 1000]
"""
from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

TARGET_GROWTH_MB = 20.0


def rss_mb() -> float:
    """This process's resident set size in MB (VmRSS; Linux)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("VmRSS not found in /proc/self/status")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=10_000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--every", type=int, default=1000)
    args = parser.parse_args()
    _common.setup()
    _common.header("Memory of one worker over many approval cycles",
                   [f"{args.cycles} cycles after {args.warmup} warm-up; RSS and Python objects every {args.every}"])

    import _data
    from agentplatform.runtime import services
    from agentplatform.runtime.models import Run
    from agentplatform.tenancy.models import User
    from django.db import reset_queries

    people = _data.personas()
    requester = people["requester"]
    _data.reset(tenant=requester.tenant)
    orders = _data.orders_create(tenant=requester.tenant, count=args.warmup + args.cycles)

    def cycle(order_id: str) -> None:
        user = User.objects.select_related("tenant").get(pk=requester.pk)
        started = services.chat_send(user=user, message=f"Please cancel order {order_id} because it was a mistake.")
        if started.run.status != Run.Status.AWAITING_CONFIRMATION or not started.pending:
            raise SystemExit(f"unexpected start: {started.run.status} {started.run.error_code}")
        user = User.objects.select_related("tenant").get(pk=requester.pk)
        final = services.chat_send(user=user, message="", conversation_id=started.run.conversation_id,
                                   confirmation_token=started.pending[0].token)
        if final.run.status != Run.Status.COMPLETED:
            raise SystemExit(f"unexpected end: {final.run.status} {final.run.error_code}")
        reset_queries()

    for order_id in orders[:args.warmup]:
        cycle(order_id)
    gc.collect()
    base_rss, base_objects = rss_mb(), len(gc.get_objects())
    print(f"  after {args.warmup} warm-up cycles: RSS {base_rss:.1f} MB, {base_objects} Python objects")
    started = time.perf_counter()
    for index, order_id in enumerate(orders[args.warmup:], start=1):
        cycle(order_id)
        if index % args.every == 0 or index == args.cycles:
            gc.collect()
            print(f"  cycle {index:6d}: RSS {rss_mb():7.1f} MB ({rss_mb() - base_rss:+6.1f}), "
                  f"{len(gc.get_objects()) - base_objects:+7d} Python objects, "
                  f"{(time.perf_counter() - started) / index * 1000:6.2f} ms per cycle", flush=True)
    growth = rss_mb() - base_rss
    verdict = "MET" if growth < TARGET_GROWTH_MB else "MISSED"
    print(f"\n  RSS growth over {args.cycles} cycles: {growth:+.1f} MB (target: under {TARGET_GROWTH_MB:.0f} MB) -> "
          f"{verdict}")
    return 0 if growth < TARGET_GROWTH_MB else 1


if __name__ == "__main__":
    raise SystemExit(main())
