"""Benchmark 3: throughput with concurrent clients on PostgreSQL.

1. Governed tool calls per second: N client threads (8 by default; 1 as the baseline), each with
   its own database connection and its own ToolContext, call `execute_tool_calls` with a
   `list_orders` call (LOW) in a loop for a fixed time.
2. Consumes per second of distinct confirmed tokens: M cancel_order calls are gated and confirmed
   beforehand; the clients then take them from a shared queue and execute each by consuming its
   confirmation through the pipeline (compare-and-set, idempotent execute, business change, audit).
   Every order must end up cancelled exactly once.
3. Resumes per second: the same with whole runs: M runs wait with a confirmed request (their resume
   held back), and the clients call `run_resume` (claim, consume, execute, model call, finish);
   once as threads of this process, once as forked processes (as Celery's prefork workers).

Python threads share one interpreter lock: the thread figures are what one process of this code
does; the process figures what N worker processes on this machine do.

Usage: DATABASE_URL=postgres://postgres@127.0.0.1:5432/ap_bench python bench/throughput.py
       [--clients 8] [--seconds 10] [--tokens 400] [--runs 200] [--only-resumes]
"""
from __future__ import annotations

import argparse
import queue
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402


def run_clients(clients: int, work) -> tuple[float, list[list[float]]]:
    """Start `clients` threads that each call `work(index, latencies)` after a common start line,
    closing their database connection at the end. Returns (wall seconds, latencies per client)."""
    from django.db import connection

    barrier = threading.Barrier(clients + 1)
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors: list[BaseException] = []

    def body(index: int) -> None:
        try:
            barrier.wait()
            work(index, latencies[index])
        except BaseException as error:  # reported after the run
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=body, args=(i,), name=f"client-{i}") for i in range(clients)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"{len(errors)} client(s) failed; first: {errors[0]!r}") from errors[0]
    return wall, latencies


def governed_calls(*, user_id: int, clients: int, seconds: float) -> None:
    from agentplatform.tenancy.models import User
    from tools.manager import ToolCallingManager

    import _data

    conversation = _data.conversation(user=User.objects.get(pk=user_id), label=f"throughput calls x{clients}")

    def work(index: int, latencies: list[float]) -> None:
        user = User.objects.select_related("tenant").get(pk=user_id)  # each client its own user and connection
        ctx, manager = _data.tool_context(user=user, conversation_id=conversation.id), ToolCallingManager()
        deadline, n = time.perf_counter() + seconds, 0
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            result = manager.execute_tool_calls(ctx, _data.assistant_message(f"c{index}-{n}", "list_orders", "{}"))
            latencies.append(_common.elapsed_ms(started))
            if not result.outcomes[0].result.success:
                raise RuntimeError(result.outcomes[0].result.to_json())
            n += 1

    wall, latencies = run_clients(clients, work)
    flat = [v for per_client in latencies for v in per_client]
    print(f"  {clients} client(s): {len(flat)} governed list_orders calls in {wall:.2f} s = "
          f"{len(flat) / wall:8.1f} calls/s")
    print(_common.row("    latency per call", flat))


def drain(items: list, clients: int, handle) -> tuple[float, list[float]]:
    """Clients take items from one queue until it is empty; handle(item) runs one. Returns
    (wall seconds, per-item latencies in ms)."""
    pending: queue.Queue = queue.Queue()
    for item in items:
        pending.put(item)

    def work(index: int, latencies: list[float]) -> None:
        while True:
            try:
                item = pending.get_nowait()
            except queue.Empty:
                return
            started = time.perf_counter()
            handle(item)
            latencies.append(_common.elapsed_ms(started))

    wall, latencies = run_clients(clients, work)
    return wall, [v for per_client in latencies for v in per_client]


def consumes(*, user, clients: int, tokens: int) -> None:
    import _data

    order_ids = _data.orders_create(tenant=user.tenant, count=tokens, start=1)
    conversation = _data.conversation(user=user, label="throughput consumes")
    calls = _data.confirmed_calls(user=user, conversation_id=conversation.id, order_ids=order_ids)
    codes: dict[str, int] = {}

    def handle(call) -> None:
        result = _data.consume(user=user_for_thread(user.pk), conversation_id=conversation.id, call=call)
        codes[result.code] = codes.get(result.code, 0) + 1

    wall, latencies = drain(calls, clients, handle)
    print(f"  {clients} clients: {tokens} distinct confirmed tokens consumed in {wall:.2f} s = "
          f"{tokens / wall:8.1f} consumes/s   outcomes {codes}")
    print(_common.row("    latency per consume", latencies))
    check_once(user=user, order_ids=order_ids)


def resumes(*, user, clients: int, runs: int, processes: bool = False) -> None:
    from agentplatform.runtime import claims, services
    from approvals import requester_actions
    from approvals.signals import confirmation_settled

    import _data

    order_ids = _data.orders_create(tenant=user.tenant, count=runs, start=200_000 if processes else 100_000)
    run_ids = []
    # Hold the runtime's resume back while the runs are prepared; the clients resume them.
    confirmation_settled.disconnect(dispatch_uid="runtime.resume_on_settle")
    try:
        for order_id in order_ids:
            conversation = _data.conversation(user=user, label=f"throughput resume {order_id}")
            outcome = services.chat_send(user=user, conversation_id=conversation.id,
                                         message=f"Please cancel order {order_id} because bench: customer changed")
            requester_actions.confirmation_confirm(token=outcome.pending[0].token, user=user)
            run_ids.append(outcome.run.pk)
    finally:
        from agentplatform.runtime import receivers

        confirmation_settled.connect(receivers.enqueue_resume_on_commit, dispatch_uid="runtime.resume_on_settle")
    statuses: dict[str, int] = {}

    def handle(run_id) -> None:
        outcome = claims.run_resume(run_id=run_id)
        status = "skipped" if outcome is None else str(outcome.run.status)
        statuses[status] = statuses.get(status, 0) + 1

    if processes:
        wall, latencies = drain_in_processes(run_ids, clients, statuses)
        kind = "processes"
    else:
        wall, latencies = drain(run_ids, clients, handle)
        kind = "threads"
    print(f"  {clients} client {kind}: {runs} waiting runs resumed in {wall:.2f} s = {runs / wall:8.1f} resumes/s   "
          f"outcomes {statuses}")
    print(_common.row("    latency per resume", latencies))
    check_once(user=user, order_ids=order_ids)


def drain_in_processes(run_ids: list, clients: int, statuses: dict[str, int]) -> tuple[float, list[float]]:
    """Resume `run_ids` from `clients` forked processes, each with its own database connection
    (as Celery's prefork workers resume runs in production). Returns (wall seconds, latencies in ms)
    and counts the outcomes into `statuses`."""
    import multiprocessing

    from django.db import connections

    connections.close_all()  # no connection crosses the fork
    context = multiprocessing.get_context("fork")
    pending, done = context.Queue(), context.Queue()
    for run_id in run_ids:
        pending.put(str(run_id))
    start = context.Barrier(clients + 1)
    workers = [context.Process(target=_resume_worker, args=(pending, done, start)) for _ in range(clients)]
    for worker in workers:
        worker.start()
    start.wait()
    started = time.perf_counter()
    latencies: list[float] = []
    for _ in workers:
        kind, payload = done.get()
        if kind == "error":
            raise RuntimeError(f"a client process failed: {payload}")
        for status, latency in payload:
            statuses[status] = statuses.get(status, 0) + 1
            latencies.append(latency)
    wall = time.perf_counter() - started
    for worker in workers:
        worker.join()
    return wall, latencies


def _resume_worker(pending, done, start) -> None:
    from django.db import connection

    from agentplatform.runtime import claims

    results = []
    try:
        start.wait()
        while True:
            try:
                run_id = pending.get(timeout=0.5)
            except queue.Empty:
                break
            began = time.perf_counter()
            outcome = claims.run_resume(run_id=run_id)
            results.append(("skipped" if outcome is None else str(outcome.run.status), _common.elapsed_ms(began)))
        done.put(("ok", results))
    except BaseException as error:  # reported by the parent
        done.put(("error", repr(error)))
    finally:
        connection.close()


_local = threading.local()


def user_for_thread(user_id: int):
    """One User instance per client thread (its own permission cache), loaded once."""
    from agentplatform.tenancy.models import User

    if getattr(_local, "user", None) is None:
        _local.user = User.objects.select_related("tenant").get(pk=user_id)
    return _local.user


def check_once(*, user, order_ids: list[str]) -> None:
    from django.db.models import Count

    from tools.catalog.models import Order

    counts = Order.objects.filter(tenant=user.tenant, order_id__in=order_ids).annotate(n=Count("cancellations"))
    wrong = [(o.order_id, o.n) for o in counts if o.n != 1]
    print(f"    side effects: {len(order_ids) - len(wrong)} of {len(order_ids)} orders cancelled exactly once"
          + (f"; WRONG: {wrong[:10]}" if wrong else ""))
    if wrong:
        raise SystemExit(1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0, help="duration of each governed-calls run")
    parser.add_argument("--tokens", type=int, default=400, help="distinct confirmed tokens to consume")
    parser.add_argument("--runs", type=int, default=200, help="waiting runs to resume")
    parser.add_argument("--only-resumes", action="store_true", help="measure only the resumes (threads, then processes)")
    args = parser.parse_args()
    _common.setup()

    import _data

    user = _data.personas()["requester"]
    _data.reset(tenant=user.tenant)
    _common.header(f"Benchmark 3: throughput with {args.clients} concurrent clients", notes=[
        "clients are threads of one process, each with its own PostgreSQL connection (no pooler)",
        "offline model for the resumes; tasks eager (no broker)",
    ])
    if not args.only_resumes:
        print("governed tool calls (list_orders, LOW, full pipeline with audit):")
        for clients in sorted({1, args.clients}):
            governed_calls(user_id=user.pk, clients=clients, seconds=args.seconds)
        print()
        print("consumes of distinct confirmed tokens (cancel_order, HIGH):")
        consumes(user=user, clients=args.clients, tokens=args.tokens)
        print()
    print("resumes of waiting runs, each with a confirmed cancel_order (claim, consume, execute, model, finish):")
    resumes(user=user, clients=args.clients, runs=args.runs)
    # As in production, where Celery's prefork workers resume runs: each client its own process
    # (threads of one process share one interpreter lock for all their Python).
    resumes(user=user, clients=args.clients, runs=args.runs, processes=True)
    print()
    print(f"end: {_common.load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
