"""Benchmark: what a policy decision costs, in process, with a 100-rule bundle in force.

A generated bundle of RULES Cedar policies (forbids and permits with confirm and approval gates, on
refund_order, cancel_order, query_inventory and list_orders, over money, strings, the user and
optional arguments) is applied to the bench tenant; then, interleaved per iteration:

- `evaluate_rules`: the Cedar verdict alone (policies.engine, no database), on calls that hit no
  rule, a confirm, an approval, a forbid;
- `gate_call`: the whole gate the pipeline runs for a call (tools.gate: the one query for the
  tenant's bundle version, the compiled bundle from the per-process cache, the tool's catalog
  entry, the verdict applied to the registry's policy);
- `gate_call` with no bundle in force (the same query, nothing to evaluate), for comparison.

The target is a median `evaluate_rules` of at most 0.3 ms. The bundle is removed afterwards (the
bench tenant's versions written by this script only).

PostgreSQL like every benchmark (DATABASE_URL=postgres://...); `--sqlite` runs it on a throwaway
SQLite file instead, for reference (the rule evaluation does not touch the database).

Usage: DATABASE_URL=postgres://postgres@127.0.0.1:5432/ap_bench python bench/policy.py
       [--iterations 5000] [--warmup 500] [--rules 100] [--sqlite]
"""
from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

TARGET_MEDIAN_MS = 0.3
COMMENT = "bench: policy"


def bundle_text(rules: int = 100, *, seed: int = 25) -> str:
    """A bundle file of `rules` Cedar policies (no limits) over the demo catalog, mixed forbids and
    permits on several tools and arguments; deterministic for a given `seed`. Satisfied by the
    calls in CALLS: a few rules each, most never."""
    pick = random.Random(seed)
    policies = []
    for n in range(rules):
        kind = n % 10
        if kind in (0, 1, 2):  # money on refund_order: a confirm, an approval, a forbid at thresholds
            limit = pick.choice([["10.00", "50.00", "100.00"], ["300.00", "500.00", "1000.00"],
                                 ["5000.00", "10000.00", "20000.00"]][kind])
            effect = "forbid" if kind == 2 else "permit"
            condition = f'context.arguments.amount.greaterThan(decimal("{limit}"))'
            tool = "refund_order"
        elif kind == 3:  # a particular order
            effect, tool = "forbid", pick.choice(["refund_order", "cancel_order"])
            condition = f'context.arguments.order_id == "A{pick.randrange(10 ** 11, 10 ** 12)}"'
        elif kind == 4:  # free text
            effect, tool = "permit", pick.choice(["refund_order", "cancel_order"])
            condition = f'context.arguments.reason like "*{pick.choice(["fraud", "chargeback", "vip", "legal"])}*"'
        elif kind == 5:  # an optional argument, guarded
            effect, tool = "permit", "query_inventory"
            condition = (f'context.arguments has warehouse_code && context.arguments.warehouse_code == '
                         f'"WH-{pick.choice(["BJ", "GZ", "CD"])}-{n:02d}"')
        elif kind == 6:  # an enum of list_orders
            effect, tool = "permit", "list_orders"
            condition = f'context.arguments has status && context.arguments.status == "{pick.choice(["REFUNDED", "CANCELLED"])}"'
        elif kind == 7:  # the user
            effect, tool = pick.choice(["permit", "forbid"]), pick.choice(["refund_order", "cancel_order"])
            condition = f'principal == User::"contractor-{n}"'
        elif kind == 8:  # the risk in force
            effect, tool = "permit", pick.choice(["cancel_order", "query_inventory"])
            condition = 'context.risk == "CRITICAL"'
        else:  # a combination
            effect, tool = "forbid", "refund_order"
            condition = (f'context.arguments.amount.greaterThan(decimal("{pick.randrange(100, 900)}.00")) && '
                         f'context.arguments.order_id like "*9{pick.randrange(10, 99)}"')
        if effect == "forbid":
            notes = f'@id("rule-{n:03d}") @reason("Rule {n} forbids this call")'
        elif kind == 0:
            notes = f'@id("rule-{n:03d}") @gate("confirm")'
        elif kind == 1 or n % 3:
            notes = f'@id("rule-{n:03d}") @gate("approval") @quorum("{2 + n % 3}")'
        else:
            notes = f'@id("rule-{n:03d}") @gate("confirm")'
        policies.append(f'  {notes}\n  {effect} (principal, action == Action::"{tool}", resource)\n'
                        f'  when {{ {condition} }};\n')
    return "version: 1\ncedar: |\n" + "\n".join(policies)


# (label, tool, arguments as the pipeline normalises them)
CALLS = [
    ("refund 60.00 (confirm)", "refund_order", {"order_id": "A202607290003", "amount": "60.00", "reason": "damaged"}),
    ("refund 600.00 (approval)", "refund_order", {"order_id": "A202607290003", "amount": "600.00", "reason": "damaged"}),
    ("refund 30000.00 (forbid)", "refund_order", {"order_id": "A202607290003", "amount": "30000.00", "reason": "x"}),
    ("cancel_order (no rule)", "cancel_order", {"order_id": "A202607290001", "reason": "changed their mind"}),
    ("list_orders (LOW, no rule)", "list_orders", {"status": None, "since": None, "cursor": None}),
]


def setup(*, sqlite: bool) -> None:
    """Django on the bench database (PostgreSQL), or on a throwaway SQLite file with `sqlite`."""
    if not sqlite:
        _common.setup()
        return
    path = Path(tempfile.mkdtemp(prefix="bench-policy-")) / "db.sqlite3"
    os.environ["DATABASE_URL"] = f"sqlite:///{path}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentplatform.settings")
    os.environ["LLM_API_KEY"] = ""
    os.environ.setdefault("LOG_LEVEL", "ERROR")
    os.environ["CELERY_TASK_ALWAYS_EAGER"] = "true"
    os.environ.pop("CELERY_BROKER_URL", None)
    sys.path.insert(0, str(_common.ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def header(title: str, notes: list[str], *, sqlite: bool) -> None:
    if not sqlite:
        _common.header(title, notes)
        return
    import platform

    import django

    print(f"== {title}")
    print(f"command : python {' '.join(sys.argv)}")
    print(f"machine : {_common._cpu_model()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}")
    print(f"software: Python {platform.python_version()}, Django {django.get_version()}, SQLite (throwaway file)")
    print(f"load    : {_common.load_average()}")
    for note in notes:
        print(f"note    : {note}")
    print()


def remove_bench_bundles(tenant_id: int) -> None:
    """Delete the bundle versions this script applied to the tenant (and only those)."""
    from policies.models import PolicyBundle

    PolicyBundle.objects.filter(tenant_id=tenant_id, comment=COMMENT).delete()


def apply_bench_bundle(*, user, rules: int):
    """Apply the generated bundle of `rules` policies to `user`'s tenant. Returns Applied."""
    from policies.services import bundle_apply
    from tools.policy_catalog import catalog

    remove_bench_bundles(user.tenant_id)
    return bundle_apply(tenant_id=user.tenant_id, text=bundle_text(rules), catalog=catalog(), actor=None,
                        comment=COMMENT)


class Timed:
    def __init__(self, label: str, fn) -> None:
        self.label, self.fn, self.samples = label, fn, []


def scenarios(*, user, ctx, compiled, bundle_tenant: bool):
    """The timed calls: evaluate_rules on each of CALLS, gate_call on two of them."""
    from policies.engine import evaluate_rules
    from tools.gate import gate_call
    from tools.models import Tool
    from tools.policy import effective_policy
    from tools.policy_catalog import catalog_entry
    from tools.registry import registry

    out = []
    for label, tool, arguments in CALLS:
        entry = catalog_entry(registry.get(tool))

        def evaluate(entry=entry, arguments=arguments):
            return evaluate_rules(compiled, entry, arguments, username=user.username, risk=entry.risk)

        out.append(Timed(f"evaluate_rules: {label}", evaluate))
    for label, tool, arguments in (CALLS[1], CALLS[4]):
        spec, row = registry.get(tool), Tool.objects.get(name=tool)
        params = spec.parameters.model_validate({k: v for k, v in arguments.items() if v is not None})
        normalized = params.model_dump(mode="json")
        base = effective_policy(spec, row, None)

        def gate(spec=spec, params=params, normalized=normalized, base=base):
            return gate_call(ctx, spec, params, normalized, base)

        out.append(Timed(f"gate_call{'' if bundle_tenant else ' (no bundle)'}: {label}", gate))
    return out


def measure(timed: list[Timed], *, iterations: int, warmup: int) -> None:
    order = random.Random(7)
    for _ in range(warmup):
        for t in timed:
            t.fn()
    gc.collect()
    for _ in range(iterations):
        for t in order.sample(timed, len(timed)):
            started = time.perf_counter()
            t.fn()
            t.samples.append(_common.elapsed_ms(started))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=5000)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--rules", type=int, default=100)
    parser.add_argument("--sqlite", action="store_true", help="a throwaway SQLite file instead of PostgreSQL")
    args = parser.parse_args()
    setup(sqlite=args.sqlite)

    import _data
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from agentplatform.runtime.demo.seed import seed_demo

    user = _data.personas()["requester"]
    other = seed_demo()["globex"]["requester"]  # a tenant without a bundle
    applied = apply_bench_bundle(user=user, rules=args.rules)
    try:
        conversation = _data.conversation(user=user, label="policy")
        ctx = _data.tool_context(user=user, conversation_id=conversation.id)
        compiled = applied.compiled
        verdicts = {label: _verdict(compiled, tool, arguments, user) for label, tool, arguments in CALLS}
        header(f"Benchmark: policy decision time, {len(compiled.rules)}-rule bundle in force", [
            f"{args.iterations} iterations after {args.warmup} warm-up, scenarios interleaved in a shuffled order",
            f"bundle version {applied.version}: {sum(r.effect == 'forbid' for r in compiled.rules.values())} forbids, "
            f"{sum(r.effect == 'permit' for r in compiled.rules.values())} permits over 4 tools",
            "verdicts: " + "; ".join(f"{k} -> {v}" for k, v in verdicts.items()),
        ], sqlite=args.sqlite)
        timed = scenarios(user=user, ctx=ctx, compiled=compiled, bundle_tenant=True)
        # the same gate for a member of a tenant without a bundle (the version query finds none)
        other_ctx = _data.tool_context(user=other, conversation_id=conversation.id)
        remove_bench_bundles(other.tenant_id)
        timed += [t for t in scenarios(user=other, ctx=other_ctx, compiled=compiled, bundle_tenant=False)
                  if t.label.startswith("gate_call")]
        timed[-3].fn()  # the first call reads and compiles the bundle (once per version per process)
        with CaptureQueriesContext(connection) as captured:
            timed[-3].fn()
        queries = len(captured.captured_queries)
        measure(timed, iterations=args.iterations, warmup=args.warmup)
        for t in timed:
            print(_common.row(t.label, t.samples))
        print()
        evaluations = [s for t in timed if t.label.startswith("evaluate_rules") for s in t.samples]
        overall = _common.summary(evaluations)
        print(f"  evaluate_rules over all calls: median {overall['median']:.3f} ms, p99 {overall['p99']:.3f} ms")
        print(f"  gate_call runs {queries} SQL statement(s) per call with the bundle compiled and cached")
        print(f"  target: median evaluate_rules <= {TARGET_MEDIAN_MS} ms: {overall['median']:.3f} ms -> "
              f"{_common.verdict(overall['median'] <= TARGET_MEDIAN_MS)}")
    finally:
        remove_bench_bundles(user.tenant_id)
    return 0


def _verdict(compiled, tool: str, arguments: dict, user) -> str:
    from policies.engine import evaluate_rules
    from tools.policy_catalog import catalog_entry
    from tools.registry import registry

    entry = catalog_entry(registry.get(tool))
    verdict = evaluate_rules(compiled, entry, arguments, username=user.username, risk=entry.risk)
    if verdict.denied:
        return f"{verdict.code} ({', '.join(verdict.rules)})"
    return f"{verdict.gate or 'no rule'}{f' x{verdict.quorum}' if verdict.gate == 'approval' else ''}"


if __name__ == "__main__":
    sys.exit(main())
