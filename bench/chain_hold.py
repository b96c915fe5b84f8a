"""How long one governed call holds its tenant's audit-chain head, and what that caps.

Each governed call is the agent loop's shape: a step of a run (runtime.step.Step: one
transaction) that runs one tool call through the pipeline (`ToolCallingManager.execute_tool_calls`
of the LOW read-only tool `bench_list_orders` with an idempotency key unique to the call: the
idempotency claim, the business read, the stored result, the audit row), then stores the tool's
message and its event with the step's end, and commits.

Each configuration (1 or 8 processes; every process on one tenant, or each on its own of 8
tenants) runs both ways, one after the other under the same load: audit rows written where the
pipeline writes them (`at once`, the behaviour before: the worker sends them immediately instead
of deferring them) and sent right before the COMMIT (now). Two passes each, every process forked
with its own database connection:
- rate: governed calls for `--seconds`, nothing instrumented; prints calls/s;
- hold: the same with two triggers (bench database only, dropped afterwards) recording
  `clock_timestamp()` when the head row is locked (a BEFORE UPDATE trigger of the upsert fires
  once the row is locked) and when the COMMIT begins (a deferred constraint trigger on the audit
  row fires inside the COMMIT); the process reads both back after the step. The hold is printed
  two ways: lock -> COMMIT begins (server clock only; the COMMIT's WAL flush, the same both ways,
  comes on top) and lock -> the COMMIT's return in the client (`time.time()`, the same clock on
  this host: an upper bound that also counts the client's wake-up, large on a loaded machine).
  Also the share of the call and the statements sent under the lock.
Then every bench tenant's chain is verified (`audit.verify_reference.verify_tenant`).

The machine is shared: the load average is printed beside the figures; compare within one run.

Usage: DATABASE_URL=postgres://postgres@127.0.0.1:5432/ap_bench python bench/chain_hold.py
       [--seconds 8] [--processes 8]
"""
from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

TENANTS = 8
TOOL = "bench_list_orders"
WARMUP = 30  # governed calls of each process before the clock starts

TRIGGER_SQL = """
CREATE OR REPLACE FUNCTION bench_chain_head_locked() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('bench.head_locked_at', extract(epoch FROM clock_timestamp())::text, false);
    RETURN NEW;
END $$;
DROP TRIGGER IF EXISTS bench_chain_head_locked ON audit_auditchainhead;
CREATE TRIGGER bench_chain_head_locked BEFORE INSERT OR UPDATE ON audit_auditchainhead
    FOR EACH ROW EXECUTE FUNCTION bench_chain_head_locked();
CREATE OR REPLACE FUNCTION bench_chain_committing() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('bench.committing_at', extract(epoch FROM clock_timestamp())::text, false);
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS bench_chain_committing ON audit_auditevent;
CREATE CONSTRAINT TRIGGER bench_chain_committing AFTER INSERT ON audit_auditevent
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION bench_chain_committing();
"""
DROP_TRIGGER_SQL = ("DROP TRIGGER IF EXISTS bench_chain_head_locked ON audit_auditchainhead; "
                    "DROP FUNCTION IF EXISTS bench_chain_head_locked(); "
                    "DROP TRIGGER IF EXISTS bench_chain_committing ON audit_auditevent; "
                    "DROP FUNCTION IF EXISTS bench_chain_committing()")


def bench_users() -> list:
    """The requesters of 8 bench tenants (`chainbench-0` ... `-7`), each with the catalog's
    permissions; created when missing."""
    from django.contrib.auth.models import Permission

    from agentplatform.runtime.demo.seed import CATALOG_PERMISSIONS, _user, _whitelist
    from agentplatform.tenancy.models import Tenant
    from tools.services import tools_sync_registry

    tools = {t.name: t for t in tools_sync_registry()}
    catalog = list(Permission.objects.filter(content_type__app_label="catalog", codename__in=CATALOG_PERMISSIONS))
    users = []
    for n in range(TENANTS):
        tenant, _ = Tenant.objects.get_or_create(slug=f"chainbench-{n}", defaults={"name": f"bench: chain {n}"})
        _whitelist(tenant, tools, reset=False)
        user, _ = _user(tenant, "requester")
        user.user_permissions.add(*catalog)  # use_tool on the bench tool: register_idempotent_tool
        users.append(user)
    return users


def _worker(user_id: int, index: int, seconds: float, hold: bool, at_once: bool, start, done) -> None:
    """One client process: governed calls in steps of its own run until `seconds` pass. `at_once`:
    audit rows are written where the pipeline writes them (the behaviour before rows were sent at
    the COMMIT), for a comparison under the same load."""
    from django.db import connection

    from agentplatform.runtime.events import EventRecorder
    from agentplatform.runtime.leases import new_lease
    from agentplatform.runtime.models import Run
    from agentplatform.runtime.step import HeldRun, Step
    from agentplatform.tenancy.models import User
    from tools.manager import ToolCallingManager

    import _data

    if at_once:
        import audit.chain

        def now(func, using="default"):
            func()
            return False

        audit.chain.before_commit = now
    try:
        user = User.objects.select_related("tenant").get(pk=user_id)
        conversation = _data.conversation(user=user, label=f"chain hold {index}")
        run = Run.objects.create(tenant=user.tenant, user=user, conversation=conversation, request_id="bench",
                                 lease_expires_at=new_lease())
        held = HeldRun(run, EventRecorder(run, last_seq=0))
        ctx = _data.tool_context(user=user, conversation_id=conversation.id, run_id=run.pk)
        manager = ToolCallingManager()
        committed: list[float] = []
        original_commit = connection.commit

        under_lock = [0, -1]  # statements from the head's on, in this call (-1: none yet)

        def commit() -> None:
            original_commit()
            committed.append(time.time())

        def count(execute, sql, params, many, context):
            if "audit_auditchainhead" in sql:
                under_lock[1] = 1  # the statement that locks the head, and those after it
            elif under_lock[1] >= 0:
                under_lock[1] += 1
            return execute(sql, params, many, context)

        connection.commit = commit

        def governed_call(call_id: str) -> None:
            message = _data.assistant_message(call_id, TOOL, f'{{"request_ref": "{call_id}"}}')
            with Step.begin(held) as step:
                outcome = manager.execute_tool_calls(ctx, message).outcomes[0]
                step.add_message(role="tool", content=outcome.result.to_json(), in_memory=False,
                                 tool_call_id=call_id)
                step.emit("TOOL_EXECUTION_COMPLETED", {"tool_call_id": call_id, "code": outcome.result.code})
            if not outcome.result.success:
                raise RuntimeError(outcome.result.to_json())

        holds, latencies, statements, calls, n = [], [], [], 0, 0
        for _ in range(WARMUP):  # prepared statements, permission caches
            n += 1
            governed_call(f"w{index}-{n}-{time.time_ns()}")
        start.wait()
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            n += 1
            under_lock[1] = -1
            began = time.perf_counter()
            if hold:
                with connection.execute_wrapper(count):
                    governed_call(f"h{index}-{n}-{time.time_ns()}")
            else:
                governed_call(f"h{index}-{n}-{time.time_ns()}")
            latencies.append(_common.elapsed_ms(began))
            calls += 1
            if hold:
                statements.append(under_lock[1])
                with connection.cursor() as cursor:
                    cursor.execute("SELECT current_setting('bench.head_locked_at', true), "
                                   "current_setting('bench.committing_at', true)")
                    locked, committing = cursor.fetchone()
                if locked and committing:
                    holds.append(((committed[-1] - float(locked)) * 1000, (float(committing) - float(locked)) * 1000))
        done.put(("ok", calls, (holds, latencies, statements)))
    except BaseException as error:  # reported by the parent
        done.put(("error", repr(error), ([], [], [])))
    finally:
        connection.close()


def measure(users: list, *, processes: int, tenants: int, seconds: float, hold: bool,
            at_once: bool) -> dict:
    """Run `processes` client processes, process i on tenant i % tenants. Returns {"rate": calls/s,
    "holds": ms per call, "latencies": ms per call, "statements": statements under the lock per call}."""
    from django.db import connections

    connections.close_all()  # no connection crosses the fork
    context = multiprocessing.get_context("fork")
    start, done = context.Barrier(processes + 1), context.Queue()
    workers = [context.Process(target=_worker, args=(users[i % tenants].pk, i, seconds, hold, at_once, start, done))
               for i in range(processes)]
    for worker in workers:
        worker.start()
    start.wait()
    began = time.perf_counter()
    calls, holds, latencies, statements = 0, [], [], []
    for _ in workers:
        kind, payload, (held, latency, under) = done.get()
        if kind == "error":
            raise RuntimeError(f"a client process failed: {payload}")
        calls += payload
        holds, latencies, statements = holds + held, latencies + latency, statements + under
    wall = time.perf_counter() - began
    for worker in workers:
        worker.join()
    return {"rate": calls / wall, "holds": holds, "latencies": latencies, "statements": statements}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="duration of each pass")
    parser.add_argument("--processes", type=int, default=8)
    args = parser.parse_args()
    _common.setup()

    from django.db import connection

    from governance_overhead import register_idempotent_tool, unregister_idempotent_tool

    import _data
    from audit.verify_reference import verify_tenant

    users = bench_users()
    for user in users:
        _data.reset(tenant=user.tenant)
        register_idempotent_tool(user=user)
    _common.header("Audit chain head: hold time per governed call, calls/s of 1 tenant and of 8 tenants", notes=[
        "governed call: a step of a run with one keyed LOW call through the pipeline, its tool message and event",
        f"each pass {args.seconds:.0f} s; forked client processes, each with its own connection",
        "hold: from the head row's lock (trigger, clock_timestamp) to the COMMIT's return (time.time)",
    ])
    try:
        configurations = [(1, 1), (1, TENANTS), (args.processes, 1), (args.processes, TENANTS)]
        for processes, tenants in configurations:
            for at_once in (True, False):  # the two ways under the same load, one after the other
                rate = measure(users, processes=processes, tenants=tenants, seconds=args.seconds, hold=False,
                               at_once=at_once)["rate"]
                with connection.cursor() as cursor:
                    cursor.execute(TRIGGER_SQL)
                try:
                    held = measure(users, processes=processes, tenants=tenants, seconds=args.seconds, hold=True,
                                   at_once=at_once)
                finally:
                    with connection.cursor() as cursor:
                        cursor.execute(DROP_TRIGGER_SQL)
                call = statistics.median(held["latencies"])
                server = [inside for _, inside in held["holds"]]
                returned = [outside for outside, _ in held["holds"]]
                way = "at once (before)" if at_once else "at COMMIT (now)"
                print(f"  {processes} proc, {tenants} tenant(s), rows {way}: {rate:.1f} calls/s, a call {call:.3f} ms "
                      f"(median); statements under the lock {statistics.median(held['statements']):.0f} + COMMIT; "
                      f"{_common.load_average()}\n"
                      f"      head held, lock -> COMMIT begins (server clock): median "
                      f"{statistics.median(server):.3f} ms, p95 {_common.percentile(server, 95):.3f} ms "
                      f"({statistics.median(server) / call:.0%} of the call)\n"
                      f"      head held, lock -> COMMIT returned to the client (upper bound: adds the WAL flush and "
                      f"the client's wake-up): median {statistics.median(returned):.3f} ms, "
                      f"p95 {_common.percentile(returned, 95):.3f} ms")
    finally:
        with connection.cursor() as cursor:
            cursor.execute(DROP_TRIGGER_SQL)
        unregister_idempotent_tool()
    broken = []
    for user in users:
        report = verify_tenant(user.tenant)
        if not report.ok:
            broken.append(f"{report.tenant_slug}: {report.problem}")
    print(f"  chains of the {TENANTS} bench tenants: " + ("OK" if not broken else "BROKEN " + "; ".join(broken)))
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
