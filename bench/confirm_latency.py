"""Benchmark 2: from a human decision to the side effect, and to the finished run.

Each sample is a real run of the agent loop (offline model): the requester asks to cancel a bench
order, the run stops at CONFIRMATION_REQUIRED, and then the decision is made through the service
layer in this process (`confirmation_confirm` with the requester's token; for refunds, two
approvers through `confirmation_approve`).

1. In-process (no broker, the embedded default): the decision commits and the resume runs right
   there (`transaction.on_commit` -> eager `resume_run` -> `run_resume`); measured from the call
   of `confirmation_confirm` to the run COMPLETED, with the model call's share.
2. Real worker: a `celery -A agentplatform worker` subprocess on Redis database 14 resumes the run.
   Measured from the decision's commit (an on_commit hook in this process, run before the enqueue)
   to the worker's TOOL_CALL_STARTED event, to the Cancellation/Refund row's creation (the tool's
   execution; target: median under 100 ms), and from the decision call to the run COMPLETED.

All instants are wall-clock times on one machine (this process and the worker share the clock).

Usage: DATABASE_URL=postgres://postgres@127.0.0.1:5432/ap_bench python bench/confirm_latency.py
       [--runs 100] [--approvals 50] [--warmup 5] [--pool prefork] [--concurrency 2]
       [--worker-env DB_CONN_MAX_AGE=60] [--skip-in-process]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

BROKER_URL = "redis://127.0.0.1:6379/14"
TARGET_EXECUTION_MS = 100.0
PEER_CYCLE_MS = "18-33 ms"
TARGET_IN_PROCESS_CYCLE_MS = 6.0
POLL_SECONDS = 0.005
TIMEOUT_SECONDS = 60.0

commit_stamps: dict[str, float] = {}


def hook_commit_stamp() -> None:
    """Record the wall-clock instant each settling decision commits, before the runtime's enqueue.

    Our receiver is connected ahead of the runtime's, so its on_commit callback runs first.
    """
    from django.db import transaction

    from agentplatform.runtime import receivers
    from approvals.signals import confirmation_settled

    def stamp(sender, *, request_id, run_id, status, **kwargs):
        if run_id is not None:
            transaction.on_commit(lambda: commit_stamps.__setitem__(str(run_id), time.time()))

    if not confirmation_settled.disconnect(dispatch_uid="runtime.resume_on_settle"):
        raise RuntimeError("the runtime's resume receiver (dispatch_uid runtime.resume_on_settle) is not connected; "
                           "update bench/confirm_latency.py to the runtime's receiver")
    confirmation_settled.connect(stamp, dispatch_uid="bench.commit_stamp", weak=False)
    confirmation_settled.connect(receivers.enqueue_resume_on_commit, dispatch_uid="runtime.resume_on_settle")


def ask(*, user, order_id: str, kind: str):
    """Start a run asking to cancel or refund `order_id`; returns its outcome (awaiting a decision)."""
    from agentplatform.runtime import services
    from agentplatform.runtime.models import Run

    import _data

    conversation = _data.conversation(user=user, label=f"latency {kind} {order_id}")
    outcome = services.chat_send(user=user, conversation_id=conversation.id,
                                 message=f"Please {kind} order {order_id} because bench: customer changed their mind")
    if outcome.run.status != Run.Status.AWAITING_CONFIRMATION or not outcome.pending:
        raise RuntimeError(f"expected a run awaiting confirmation, got {outcome.run.status}")
    return outcome


def decide(*, outcome, approvers) -> float:
    """Make the settling decision; returns the wall-clock instant the decision call started."""
    from approvals import approver_actions, requester_actions

    pending = outcome.pending[0]
    if pending.token:
        started = time.time()
        requester_actions.confirmation_confirm(token=pending.token, user=outcome.run.user)
        return started
    first, second = approvers
    approver_actions.confirmation_approve(request_id=pending.confirmation_id, approver=first, comment="bench")
    started = time.time()
    approver_actions.confirmation_approve(request_id=pending.confirmation_id, approver=second, comment="bench")
    return started


def wait_finished(run_id) -> tuple[str, float]:
    """Poll until the run is COMPLETED or FAILED; returns (status, updated_at as epoch seconds)."""
    from agentplatform.runtime.models import Run

    deadline = time.monotonic() + TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        status, updated = Run.objects.filter(pk=run_id).values_list("status", "updated_at").get()
        if status in (Run.Status.COMPLETED, Run.Status.FAILED):
            return status, updated.timestamp()
        time.sleep(POLL_SECONDS)
    raise RuntimeError(f"run {run_id} did not finish within {TIMEOUT_SECONDS} s (is the worker consuming?)")


def instants(*, run_id, order_id: str, kind: str) -> dict[str, float]:
    """Wall-clock instants the database recorded for one resumed sample."""
    from agentplatform.runtime.models import RunEvent
    from tools.catalog.models import Cancellation, Refund

    effect = (Cancellation.objects.filter(order__order_id=order_id).values_list("cancelled_at", flat=True)
              if kind == "cancel" else Refund.objects.filter(order__order_id=order_id).values_list("refunded_at", flat=True))
    effects = list(effect)
    if len(effects) != 1:
        raise RuntimeError(f"order {order_id}: {len(effects)} side effects, expected exactly 1")
    started = (RunEvent.objects.filter(run_id=run_id, type=RunEvent.Type.TOOL_CALL_STARTED)
               .order_by("seq").values_list("created_at", flat=True).last())
    return {"executed": effects[0].timestamp(), "tool_started": started.timestamp()}


class Sample:
    def __init__(self, *, decision: float, commit: float, finished: float, executed: float, tool_started: float):
        self.decision_to_completed = (finished - decision) * 1000
        self.commit_to_started = (tool_started - commit) * 1000
        self.commit_to_executed = (executed - commit) * 1000
        self.decision_to_commit = (commit - decision) * 1000


def one_sample(*, user, approvers, order_id: str, kind: str) -> Sample:
    from agentplatform.runtime.models import Run

    outcome = ask(user=user, order_id=order_id, kind=kind)
    run_id = str(outcome.run.pk)
    decision = decide(outcome=outcome, approvers=approvers)
    status, finished = wait_finished(run_id)
    if status != Run.Status.COMPLETED:
        raise RuntimeError(f"run {run_id} ended {status}")
    return Sample(decision=decision, commit=commit_stamps.pop(run_id), finished=finished,
                  **instants(run_id=run_id, order_id=order_id, kind=kind))


def run_samples(label: str, count: int, warmup: int, orders: list[str], **kwargs) -> list[Sample]:
    samples = []
    for index in range(warmup + count):
        sample = one_sample(order_id=orders.pop(), **kwargs)
        if index >= warmup:
            samples.append(sample)
    print(f"{label}: {count} samples after {warmup} warm-up")
    return samples


def print_samples(samples: list[Sample], *, with_dispatch: bool) -> None:
    print(_common.row("decision call -> its commit", [s.decision_to_commit for s in samples]))
    if with_dispatch:
        print(_common.row("commit -> worker's TOOL_CALL_STARTED", [s.commit_to_started for s in samples]))
    print(_common.row("commit -> side effect row created", [s.commit_to_executed for s in samples]))
    print(_common.row("decision call -> run COMPLETED", [s.decision_to_completed for s in samples]))


def in_process(*, user, approvers, runs: int, warmup: int, orders: list[str]) -> list[Sample]:
    """Phase 1: eager resume inside the decision's on_commit; the model call's share measured too."""
    from agentplatform.celery import app
    from agentplatform.llm import client

    model_ms: list[float] = []
    original = client.complete

    def timed_complete(*args, **kwargs):
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            model_ms.append(_common.elapsed_ms(started))

    app.conf.task_always_eager = True
    client.complete = timed_complete
    try:
        samples = run_samples("in-process (eager) confirm-and-resume, cancel_order", runs, warmup, orders,
                              user=user, approvers=approvers, kind="cancel")
    finally:
        client.complete = original
        app.conf.task_always_eager = False
    # Each sample made two model calls: the one that proposed the call (before the decision, not
    # timed) and the one after the tool result (inside the cycle): keep the second of each pair.
    print_samples(samples, with_dispatch=False)
    cycle = _common.summary([s.decision_to_completed for s in samples])["median"]
    model = 0.0
    if len(model_ms) == 2 * (warmup + runs):
        resumed_model_ms = model_ms[1::2][-runs:]
        print(_common.row("  of which the model call (offline, SDK)", resumed_model_ms))
        model = _common.summary(resumed_model_ms)["median"]
    else:
        print(f"  (model calls not attributed: {len(model_ms)} calls for {warmup + runs} samples, expected two each)")
    print(f"  target: one approve-and-resume cycle under {TARGET_IN_PROCESS_CYCLE_MS:.0f} ms in-process "
          f"(peers: {PEER_CYCLE_MS} median on PostgreSQL): {cycle:.3f} ms -> "
          f"{_common.verdict(cycle < TARGET_IN_PROCESS_CYCLE_MS)}; without the model call {cycle - model:.3f} ms")
    return samples


def require_redis() -> None:
    """Exit 2 with a clear message when the bench broker is not reachable."""
    import redis

    try:
        redis.Redis.from_url(BROKER_URL, socket_connect_timeout=2).ping()
    except redis.RedisError as error:
        print(f"bench: this benchmark needs Redis at {BROKER_URL} for its Celery worker ({error})", file=sys.stderr)
        sys.exit(2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100, help="samples per phase (requester confirmations)")
    parser.add_argument("--approvals", type=int, default=50, help="samples of the two-approver refund path")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--pool", default="prefork", choices=["prefork", "solo", "threads"])
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--worker-env", action="append", default=[], metavar="NAME=VALUE",
                        help="extra environment of the worker, e.g. DB_CONN_MAX_AGE=60 (repeatable)")
    parser.add_argument("--skip-in-process", action="store_true", help="only the real-worker phase")
    args = parser.parse_args()
    _common.require_postgres()
    require_redis()
    _common.setup(broker_url=BROKER_URL)

    import _data
    from _worker import Worker

    people = _data.personas()
    user, approvers = people["requester"], (people["approver1"], people["approver2"])
    _data.reset(tenant=user.tenant)
    total = 2 * (args.runs + args.warmup) + args.approvals + args.warmup
    orders = list(reversed(_data.orders_create(tenant=user.tenant, count=total)))
    hook_commit_stamp()
    worker = Worker(broker_url=BROKER_URL, pool=args.pool, concurrency=args.concurrency, name="bench-latency",
                    extra_env=dict(item.split("=", 1) for item in args.worker_env))
    _common.header("Benchmark 2: confirm-to-execution latency and the approve-and-resume cycle", notes=[
        "offline model (deterministic, in-process HTTP transport through the openai SDK)",
        f"worker: {worker.display()}",
        f"each sample: a fresh run and conversation; the run polls every {POLL_SECONDS * 1000:.0f} ms, "
        "instants come from the rows the resume wrote",
    ])
    if not args.skip_in_process:
        in_process(user=user, approvers=approvers, runs=args.runs, warmup=args.warmup, orders=orders)
        print()
    with worker:
        confirmed = run_samples("real worker, requester confirms (cancel_order, HIGH)", args.runs, args.warmup,
                                orders, user=user, approvers=approvers, kind="cancel")
        print_samples(confirmed, with_dispatch=True)
        execution = _common.summary([s.commit_to_executed for s in confirmed])["median"]
        print(f"  target: commit -> execution by a real worker, median under {TARGET_EXECUTION_MS:.0f} ms: "
              f"{execution:.3f} ms -> {_common.verdict(execution < TARGET_EXECUTION_MS)}")
        if args.approvals:
            print()
            approved = run_samples("real worker, second of two approvers decides (refund_order, CRITICAL)",
                                   args.approvals, args.warmup, orders, user=user, approvers=approvers, kind="refund")
            print_samples(approved, with_dispatch=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
