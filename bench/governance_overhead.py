"""Benchmark 1: what governance costs on a LOW tool call.

The same business function (tools.catalog.services.orders_list) is timed two ways, interleaved,
in one process, on one PostgreSQL database:

- direct: `orders_list(tenant_id=...)` as a plain function call;
- governed: `ToolCallingManager().execute_tool_calls(ctx, assistant_message)`, i.e. resolve
  (offered tools: tenant policy and guardian `use_tool`), parse, schema- and business-validate,
  authorize, policy, execute, convert and mask, audit.

Two governed tools are measured: the built-in `list_orders` (LOW, read-only, no idempotency key)
and a throwaway LOW read-only tool `bench_list_orders` registered by this script with an
idempotency key unique to each call, so its figures include the idempotent execute (claim INSERT,
stored result UPDATE).
The target (median under 3 ms added) is judged on the latter: it is the whole pipeline.

Then a breakdown run (with timing wrappers, so its total is a little higher) shows where the added
time goes. `--profile` prints cProfile's top functions of the governed call as well.

With `--policy-rules N` (or BENCH_POLICY_RULES=N) the tenant has a policy bundle of N generated
Cedar rules in force (bench/policy.py's bundle: forbids and permits on several tools) while it
runs, so every governed call is also judged by the rules; `--bundle FILE` applies a bundle file
instead. The bundle versions it applied are removed afterwards. With a bundle the target is the
governed LOW call within +2 ms of the direct call at the median.

Usage: DATABASE_URL=postgres://postgres@127.0.0.1:5432/ap_bench python bench/governance_overhead.py
       [--iterations 2000] [--warmup 200] [--profile] [--policy-rules 100 | --bundle FILE]
"""
from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

TARGET_ADDED_MS = 3.0
TARGET_ADDED_WITH_BUNDLE_MS = 2.0  # the governed LOW call (list_orders) with a bundle in force
IDEMPOTENT_TOOL = "bench_list_orders"


def register_idempotent_tool(*, user):
    """Register `bench_list_orders` (LOW, read-only like list_orders, idempotency key per
    `request_ref`), mirror it in the database, enable it for the user's tenant and grant `use_tool`.
    Returns its ToolSpec."""
    from guardian.shortcuts import assign_perm
    from pydantic import BaseModel, ConfigDict, Field

    from tools.catalog import services
    from tools.hashing import key_hash
    from tools.models import Tool
    from tools.registry import ToolSpec, registry
    from tools.services import tenant_tool_set_enabled, tools_sync_registry

    class BenchListOrders(BaseModel):
        model_config = ConfigDict(extra="forbid")
        request_ref: str = Field(description="Caller's reference of this listing", max_length=64)

    def execute(ctx, params):
        return services.orders_list(tenant_id=ctx.tenant_id)

    registry.unregister(IDEMPOTENT_TOOL)
    spec = registry.register(ToolSpec(
        name=IDEMPOTENT_TOOL, description="Benchmark only: list_orders with an idempotency key.",
        parameters=BenchListOrders, execute=execute, risk="LOW", permission="catalog.view_order", read_only=True,
        idempotency_key=lambda ctx, p: key_hash(ctx.tenant_id, ctx.conversation_id, IDEMPOTENT_TOOL, p.request_ref),
        result_converter=registry.get("list_orders").result_converter,
    ))
    tools_sync_registry()
    tenant_tool_set_enabled(tenant_id=user.tenant_id, tool_name=IDEMPOTENT_TOOL, enabled=True)
    assign_perm("tools.use_tool", user, Tool.objects.get(name=IDEMPOTENT_TOOL))
    return spec


def unregister_idempotent_tool() -> None:
    from tools.registry import registry
    from tools.services import tools_sync_registry

    registry.unregister(IDEMPOTENT_TOOL)
    tools_sync_registry()  # marks the row unregistered: it is offered to nobody afterwards


class Scenario:
    """One way of running the business function; `__call__(i)` runs iteration i once."""

    def __init__(self, label, fn):
        self.label, self.fn, self.samples = label, fn, []

    def timed(self, i: int) -> None:
        started = time.perf_counter()
        self.fn(i)
        self.samples.append(_common.elapsed_ms(started))


def build_scenarios(*, user, ctx):
    from tools.catalog import services
    from tools.manager import ToolCallingManager

    import _data

    manager = ToolCallingManager()

    def direct(i):
        services.orders_list(tenant_id=user.tenant_id)

    def governed(i):
        result = manager.execute_tool_calls(ctx, _data.assistant_message(f"call_{i}", "list_orders", "{}"))
        assert result.outcomes[0].result.success, result.outcomes[0].result

    def governed_idempotent(i):
        message = _data.assistant_message(f"call_i{i}", IDEMPOTENT_TOOL, f'{{"request_ref": "r-{i}"}}')
        result = manager.execute_tool_calls(ctx, message)
        assert result.outcomes[0].result.success, result.outcomes[0].result

    return [Scenario("direct orders_list()", direct),
            Scenario("governed list_orders", governed),
            Scenario(f"governed {IDEMPOTENT_TOOL} (+ idempotency)", governed_idempotent)]


def measure(scenarios, *, iterations: int, warmup: int, offset: int) -> None:
    """Run every scenario `warmup` times, then `iterations` times each, interleaved in a shuffled
    order per iteration so drift (autovacuum, caches) hits all of them alike."""
    order = random.Random(4)
    for i in range(warmup):
        for scenario in scenarios:
            scenario.fn(offset + i)
    gc.collect()
    for i in range(offset + warmup, offset + warmup + iterations):
        for scenario in order.sample(scenarios, len(scenarios)):
            scenario.timed(i)


def queries_per_call(scenarios, *, offset: int) -> dict[str, int]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    counts = {}
    for scenario in scenarios:
        with CaptureQueriesContext(connection) as captured:
            scenario.fn(offset)
        counts[scenario.label] = len(captured.captured_queries)
    return counts


class _SelfTimer:
    """Wraps collaborators of the pipeline and books each call's *own* time (its duration minus
    the wrapped calls nested in it) to a bucket, so the buckets add up without double counting."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self._children: list[float] = []

    @contextmanager
    def wrap(self, owner, name: str, bucket: str):
        original = getattr(owner, name)

        def wrapper(*args, **kwargs):
            self._children.append(0.0)
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                elapsed = _common.elapsed_ms(started)
                nested = self._children.pop()
                self.totals[bucket] += elapsed - nested
                if self._children:
                    self._children[-1] += elapsed

        setattr(owner, name, wrapper)
        try:
            yield
        finally:
            setattr(owner, name, original)


def breakdown(scenario, *, iterations: int, offset: int) -> dict[str, float]:
    """Mean milliseconds per call spent in each part of the governed call (own time: nested
    parts are booked to their own bucket), measured with wrappers around the pipeline's
    collaborators; "the rest" is the pipeline's own Python code."""
    from contextlib import ExitStack

    from django.db import connection

    import tools.execution as execution_module
    import tools.manager as manager_module
    from audit import events
    from tools.catalog import services

    timer = _SelfTimer()
    with ExitStack() as stack:
        for owner, name, bucket in (
            (manager_module, "offered_tools", "resolve: offered_tools (tenant policy, guardian use_tool)"),
            (services, "orders_list", "business function orders_list (2 SELECTs)"),
            (events, "tool_call_decided", "audit: AuditEvent INSERT"),
            (execution_module, "idempotency_execute", "idempotency: claim INSERT + result UPDATE"),
            (connection, "commit", "COMMIT (WAL flush to disk)"),
            (connection, "savepoint", "SAVEPOINT / RELEASE round trips"),
            (connection, "savepoint_commit", "SAVEPOINT / RELEASE round trips"),
        ):
            stack.enter_context(timer.wrap(owner, name, bucket))
        started = time.perf_counter()
        for i in range(offset, offset + iterations):
            scenario.fn(i)
        total = _common.elapsed_ms(started)
    parts = {k: v / iterations for k, v in timer.totals.items()}
    parts["the rest: parse, validate, authorize, policy, convert, mask, metrics, BEGIN"] = (
        total / iterations - sum(parts.values()))
    return {"total": total / iterations, **parts}


def profile(scenario, *, iterations: int, offset: int) -> None:
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for i in range(offset, offset + iterations):
        scenario.fn(i)
    profiler.disable()
    print(f"cProfile of {iterations} calls of {scenario.label} (cumulative; profiler overhead inflates the times):")
    pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(r"agentplatform|tools|audit|"
                                                                                 r"approvals|guardian", 25)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--profile", action="store_true", help="also print cProfile's top functions")
    parser.add_argument("--resolve-per-call", action="store_true",
                        help="query the offered tools on every call (a caller without a run) instead of once per run")
    parser.add_argument("--policy-rules", type=int, default=int(os.environ.get("BENCH_POLICY_RULES") or 0),
                        help="a policy bundle of this many generated rules in force (env BENCH_POLICY_RULES)")
    parser.add_argument("--bundle", type=Path, help="a policy bundle file in force instead of generated rules")
    args = parser.parse_args()
    _common.setup()

    import _data

    user = _data.personas()["requester"]
    _data.reset(tenant=user.tenant)
    register_idempotent_tool(user=user)
    bundle = apply_bundle(user=user, rules=args.policy_rules, path=args.bundle)
    try:
        conversation = _data.conversation(user=user, label="governance overhead")
        ctx = _data.tool_context(user=user, conversation_id=conversation.id)
        if not args.resolve_per_call:
            from tools.manager import ToolCallingManager

            _, ctx = ToolCallingManager().resolve(ctx)  # once per run, as the agent loop does
        _common.header("Benchmark 1: governance overhead of a LOW tool call", notes=[
            "same process, same database, one run; direct and governed calls interleaved per iteration",
            f"{args.iterations} iterations after {args.warmup} warm-up; tenant acme has "
            f"{_orders_count(user)} orders (one page)",
            "ToolContext built once, as in a run (the user's permission cache is warm after resolve_definitions)",
            "offered tools queried on every call (--resolve-per-call)" if args.resolve_per_call else
            "offered tools resolved once per run, as the loop does (--resolve-per-call to query on every call)",
            f"policy bundle in force: version {bundle.version}, {len(bundle.compiled.rules)} rules, "
            f"{len(bundle.compiled.limits)} limits ({args.bundle or 'generated by bench/policy.py'})" if bundle else
            "no policy bundle in force (--policy-rules 100 or --bundle FILE to judge every call by one)",
        ])
        scenarios = build_scenarios(user=user, ctx=ctx)
        if bundle is not None:
            comparison = without_bundle_scenario()
            if comparison is not None:
                scenarios.append(comparison)
        offset = 0
        counts = queries_per_call(scenarios, offset=offset)
        offset += 1
        measure(scenarios, iterations=args.iterations, warmup=args.warmup, offset=offset)
        offset += args.iterations + args.warmup
        report(scenarios, counts, bundle=bundle is not None)
        print()
        print("where the added time goes (mean ms per call, timing wrappers included):")
        for scenario in scenarios[1:]:
            parts = breakdown(scenario, iterations=min(500, args.iterations), offset=offset)
            offset += min(500, args.iterations)
            total = parts.pop("total")
            business = next(v for k, v in parts.items() if k.startswith("business function"))
            print(f"  {scenario.label}: total {total:.3f} ms, of which governance {total - business:.3f} ms")
            for label, value in sorted(parts.items(), key=lambda kv: -kv[1]):
                print(f"    {value:7.3f}  {label}")
        if args.profile:
            print()
            profile(scenarios[2], iterations=min(300, args.iterations), offset=offset)
    finally:
        if bundle is not None:
            from policy import remove_bench_bundles

            remove_bench_bundles(user.tenant_id)
        unregister_idempotent_tool()
    return 0


def apply_bundle(*, user, rules: int, path: Path | None):
    """Apply a policy bundle to `user`'s tenant for the run: the file at `path`, else `rules`
    generated rules (bench/policy.py). Returns policies.services.Applied, or None for neither."""
    if path is None and not rules:
        return None
    from policy import COMMENT, bundle_text, remove_bench_bundles

    from policies.services import bundle_apply
    from tools.policy_catalog import catalog

    from policies.selectors import bundle_in_force

    remove_bench_bundles(user.tenant_id)
    text = path.read_text() if path is not None else bundle_text(rules)
    applied = bundle_apply(tenant_id=user.tenant_id, text=text, catalog=catalog(), actor=None, comment=COMMENT)
    bundle_in_force(user.tenant_id)  # compiled once per process, as a server's first call does
    return applied


def without_bundle_scenario(*, label: str = "governed list_orders, tenant without a bundle"):
    """The governed LOW call by globex's requester (a tenant without a bundle: the same query for
    the version in force, nothing to evaluate), interleaved with the others so the bundle's own
    cost is read under the same load."""
    from agentplatform.runtime.demo.seed import seed_demo
    from policies.models import PolicyBundle
    from tools.manager import ToolCallingManager

    import _data

    other = seed_demo()["globex"]["requester"]
    _data.reset(tenant=other.tenant)
    if PolicyBundle.objects.filter(tenant_id=other.tenant_id).exists():
        return None
    conversation = _data.conversation(user=other, label="governance overhead, no bundle")
    _, ctx = ToolCallingManager().resolve(_data.tool_context(user=other, conversation_id=conversation.id))
    manager = ToolCallingManager()

    def governed(i):
        result = manager.execute_tool_calls(ctx, _data.assistant_message(f"call_g{i}", "list_orders", "{}"))
        assert result.outcomes[0].result.success, result.outcomes[0].result

    return Scenario(label, governed)


def _orders_count(user) -> int:
    from tools.catalog.models import Order

    return Order.objects.filter(tenant_id=user.tenant_id).count()


def report(scenarios, counts: dict[str, int], *, bundle: bool = False) -> None:
    direct = _common.summary(scenarios[0].samples)
    for scenario in scenarios:
        print(_common.row(f"{scenario.label} [{counts[scenario.label]} SQL]", scenario.samples))
    print()
    for scenario in scenarios[1:]:
        governed = _common.summary(scenario.samples)
        added, added_p99 = governed["median"] - direct["median"], governed["p99"] - direct["p99"]
        print(f"  {scenario.label}: x{governed['median'] / direct['median']:.2f} the direct call at the median; "
              f"added {added:.3f} ms at the median, {added_p99:.3f} ms at p99")
    idempotent = _common.summary(scenarios[2].samples)
    added = idempotent["median"] - direct["median"]
    print(f"  target: under {TARGET_ADDED_MS:.0f} ms added at the median (whole pipeline, with idempotency): "
          f"{added:.3f} ms -> {_common.verdict(added < TARGET_ADDED_MS)}")
    if bundle:
        low = _common.summary(scenarios[1].samples)["median"] - direct["median"]
        if len(scenarios) > 3:
            cost = _common.summary(scenarios[1].samples)["median"] - _common.summary(scenarios[3].samples)["median"]
            print(f"  the bundle's own cost on the governed LOW call (acme with it - globex without, interleaved): "
                  f"{cost:.3f} ms at the median")
        print(f"  target with a policy bundle in force: the governed LOW call (list_orders) within "
              f"+{TARGET_ADDED_WITH_BUNDLE_MS:.0f} ms of the direct call at the median: {low:.3f} ms -> "
              f"{_common.verdict(low <= TARGET_ADDED_WITH_BUNDLE_MS)}")


if __name__ == "__main__":
    sys.exit(main())
