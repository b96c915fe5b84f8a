"""Benchmark 4: exactly once under load. 200 confirmed tokens, each raced by 10 consumers
released together (a cyclic barrier), on PostgreSQL; the side effects are counted in the database.

Three races, each on its own 200 bench orders (cancel_order, HIGH):

- consume: 10 threads execute the same confirmed call through the pipeline at once (what 10
  resumers would do): the consume compare-and-set and the idempotency claim must let one through.
- resume: 10 threads call `run_resume` on the same waiting run whose request is confirmed (the same
  resume message delivered 10 times): the run's compare-and-set claim must let one through.
- confirm: 10 clients send the same token with `chat_send(confirmation_token=...)` (double clicks,
  retries): one confirms and resumes, the others are refused.

Expected: exactly 200 executions per race (one Cancellation row, one EXECUTED audit row per order)
and 200 x 9 refused consumers. Exits 1 when any count differs.

Usage: DATABASE_URL=postgres://postgres@127.0.0.1:5432/ap_bench python bench/exactly_once.py
       [--tokens 200] [--consumers 10] [--races consume,resume,confirm]
"""
from __future__ import annotations

import argparse
import sys
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

RACES = ("consume", "resume", "confirm")


def race(items: list, consumers: int, attempt) -> tuple[Counter, float, object]:
    """`consumers` threads attempt every item together: before each item they wait on one cyclic
    barrier, so all of them hit the same token at the same moment. attempt(item) returns a label
    for the tally (or raises; the exception's code is tallied). Returns (tally, wall seconds, start instant)."""
    from django.db import connection

    from core import clock

    barrier = threading.Barrier(consumers)
    tally: Counter = Counter()
    lock = threading.Lock()
    failures: list[BaseException] = []

    def body() -> None:
        try:
            for item in items:
                barrier.wait()
                try:
                    label = attempt(item)
                except Exception as error:  # a refusal is an expected outcome: tally its code
                    code = getattr(error, "code", None)
                    if code is None:
                        raise
                    label = f"refused {code}"
                with lock:
                    tally[label] += 1
        except BaseException as error:
            failures.append(error)
            barrier.abort()
        finally:
            connection.close()

    threads = [threading.Thread(target=body, name=f"consumer-{i}") for i in range(consumers)]
    started, started_at = time.perf_counter(), clock.now()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise RuntimeError(f"a consumer failed: {failures[0]!r}") from failures[0]
    return tally, time.perf_counter() - started, started_at


_local = threading.local()


def thread_user(user_id: int):
    """Each consumer its own User instance (as each request or worker would load it)."""
    from agentplatform.tenancy.models import User

    if getattr(_local, "user", None) is None:
        _local.user = User.objects.select_related("tenant").get(pk=user_id)
    return _local.user


def waiting_runs(*, user, order_ids: list[str], confirm: bool) -> list:
    """One run per order, waiting for its cancel_order confirmation. confirm=True also confirms it
    with the runtime's resume held back. Returns [(run_id, token)]."""
    from agentplatform.runtime import receivers, services
    from approvals import requester_actions
    from approvals.signals import confirmation_settled

    import _data

    runs = []
    confirmation_settled.disconnect(dispatch_uid="runtime.resume_on_settle")
    try:
        for order_id in order_ids:
            conversation = _data.conversation(user=user, label=f"exactly once {order_id}")
            outcome = services.chat_send(user=user, conversation_id=conversation.id,
                                         message=f"Please cancel order {order_id} because bench: customer changed")
            token = outcome.pending[0].token
            if confirm:
                requester_actions.confirmation_confirm(token=token, user=user)
            runs.append((outcome.run.pk, conversation.pk, token))
    finally:
        confirmation_settled.connect(receivers.enqueue_resume_on_commit, dispatch_uid="runtime.resume_on_settle")
    return runs


def race_consume(*, user, order_ids: list[str], consumers: int) -> tuple[Counter, float, object, list]:
    import _data

    conversation = _data.conversation(user=user, label="exactly once consume")
    calls = _data.confirmed_calls(user=user, conversation_id=conversation.id, order_ids=order_ids)

    def attempt(call) -> str:
        result = _data.consume(user=thread_user(user.pk), conversation_id=conversation.id, call=call)
        # An idempotent replay returns the stored result: the audit tally tells it from the execution.
        if result.success:
            return f"ok {result.code} (the execution, or a replay of its stored result: see the audit rows)"
        return f"refused {result.code}"

    return (*race(calls, consumers, attempt), [conversation.pk])


def race_resume(*, user, order_ids: list[str], consumers: int) -> tuple[Counter, float, object, list]:
    from agentplatform.runtime import claims

    runs = waiting_runs(user=user, order_ids=order_ids, confirm=True)

    def attempt(item) -> str:
        outcome = claims.run_resume(run_id=item[0])
        return "skipped (claimed by another)" if outcome is None else f"resumed -> {outcome.run.status}"

    return (*race(runs, consumers, attempt), [conversation_id for _, conversation_id, _ in runs])


def race_confirm(*, user, order_ids: list[str], consumers: int) -> tuple[Counter, float, object, list]:
    from agentplatform.runtime import services

    runs = waiting_runs(user=user, order_ids=order_ids, confirm=False)

    def attempt(item) -> str:
        run_id, conversation_id, token = item
        outcome = services.chat_send(user=thread_user(user.pk), message="", conversation_id=conversation_id,
                                     confirmation_token=token)
        return f"confirmed -> run {outcome.run.status}"

    return (*race(runs, consumers, attempt), [conversation_id for _, conversation_id, _ in runs])


def audit_tally(*, user, conversation_ids: list, since) -> Counter:
    """Audit rows written during the race for the race's conversations, by (decision, status)."""
    from audit.models import AuditEvent

    rows = AuditEvent.objects.filter(tenant=user.tenant, conversation_id__in=conversation_ids, occurred_at__gte=since)
    return Counter(f"{decision} {status}" for decision, status in rows.values_list("decision", "status"))


def count_effects(*, user, order_ids: list[str]) -> dict[str, int]:
    """Side effects of the race's orders as the database has them."""
    from django.db.models import Count

    from audit.models import AuditEvent
    from tools.catalog.models import Cancellation, Order
    from tools.models import IdempotencyRecord

    cancellations = Cancellation.objects.filter(tenant=user.tenant, order__order_id__in=order_ids)
    per_order = Order.objects.filter(tenant=user.tenant, order_id__in=order_ids).annotate(n=Count("cancellations"))
    business_ids = [str(pk) for pk in cancellations.values_list("pk", flat=True)]
    return {
        "executions": cancellations.count(),
        "orders_cancelled_once": sum(1 for o in per_order if o.n == 1),
        "orders_cancelled_twice_or_more": sum(1 for o in per_order if o.n > 1),
        "idempotency_records": IdempotencyRecord.objects.filter(tenant=user.tenant,
                                                                business_result_id__in=business_ids).count(),
        "audit_executed": AuditEvent.objects.filter(tenant=user.tenant, decision="EXECUTED",
                                                    business_result_id__in=business_ids).count(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--consumers", type=int, default=10)
    parser.add_argument("--races", default=",".join(RACES), help="comma-separated subset of " + ", ".join(RACES))
    args = parser.parse_args()
    races = [r.strip() for r in args.races.split(",") if r.strip()]
    if not set(races) <= set(RACES):
        parser.error(f"unknown race in {races}")
    _common.setup()

    import _data

    user = _data.personas()["requester"]
    _data.reset(tenant=user.tenant)
    _common.header(f"Benchmark 4: exactly once, {args.tokens} tokens x {args.consumers} racing consumers", notes=[
        "consumers are threads, each with its own PostgreSQL connection, released together per token",
        "tasks eager (no broker), offline model",
    ])
    runners = {"consume": race_consume, "resume": race_resume, "confirm": race_confirm}
    failed = False
    for index, name in enumerate(races):
        order_ids = _data.orders_create(tenant=user.tenant, count=args.tokens, start=index * 1_000_000 + 1)
        tally, wall, since, conversation_ids = runners[name](user=user, order_ids=order_ids, consumers=args.consumers)
        effects = count_effects(user=user, order_ids=order_ids)
        attempts = sum(tally.values())
        winners = effects["executions"]
        ok = (winners == args.tokens == effects["orders_cancelled_once"] == effects["audit_executed"]
              == effects["idempotency_records"] and not effects["orders_cancelled_twice_or_more"])
        failed |= not ok
        print(f"race '{name}': {args.tokens} tokens x {args.consumers} consumers = {attempts} attempts in {wall:.1f} s")
        print(f"  executions: {winners} (expected {args.tokens}) -> {'EXACTLY ONCE' if ok else 'VIOLATED'}; "
              f"refused or no-op consumers: {attempts - winners}")
        print(f"  database: {effects}")
        print("  consumers' outcomes:")
        for label, count in sorted(tally.items(), key=lambda kv: -kv[1]):
            print(f"  {count:6d} x {label}")
        print("  audit rows the race wrote (decision status):")
        for label, count in sorted(audit_tally(user=user, conversation_ids=conversation_ids, since=since).items(),
                                   key=lambda kv: -kv[1]):
            print(f"  {count:6d} x {label}")
        print()
    print(f"end: {_common.load_average()}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
