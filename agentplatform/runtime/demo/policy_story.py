"""The demo's policy-as-code steps (`manage.py demo`, steps 8 and 13-15): the operator's waiver and
the tenants' bundles (agentplatform.runtime.demo.policy), a small refund confirmed by the
requester, one over the ceiling refused with finance's reason, and the per-order limit stopping a
fourth refund of one order. A mixin of the demo command: it uses the command's chat, title, say,
ok and expect."""
from __future__ import annotations

from agentplatform.runtime.demo.policy import BUNDLES, POLICY_ORDERS, WAIVER, policy_setup
from agentplatform.runtime.demo.seed import order_id
from agentplatform.runtime.models import Run, RunEvent
from audit.models import AuditEvent
from tools.catalog.models import Refund


class PolicyStory:
    """The policy steps of the demo command (mixed into its Command)."""

    def policy_story_setup(self) -> None:
        """Step 8: the operator's waiver and the tenants' bundles (agentplatform.runtime.demo.policy)."""
        self.title("8. Policy as code: acme's bundle gates refunds by their amount and history")
        done = policy_setup({"acme": self.acme["admin"], "globex": self.globex["admin"]})
        operator = "wrote" if done.waived else "keeps"
        self.say(f"   platform-operator {operator} refund_order's critical floor waiver: the registry gate is the "
                 "requester's confirmation (risk HIGH); each tenant's bundle decides from there")
        self.say(f"   waiver: {WAIVER}")
        for slug, applied in done.applied.items():
            state = f"applied as version {applied.version}" if applied.changed else \
                f"version {applied.version} already in force"
            self.say(f"   {slug}: {BUNDLES[slug].name} {state}")
        acme = done.applied["acme"]
        if acme.changed:
            for line in acme.diff.splitlines():
                self.say(f"   | {line}")
        rules = sorted(rule.id for rule in acme.compiled.rules.values())
        limits = sorted(limit.id for limit in acme.compiled.limits)
        self.expect(rules == ["no-refund-over-5000", "refunds-over-500-need-two"]
                    and limits == ["refund-sum-per-order-day", "refunds-per-order-day"],
                    f"acme's bundle is in force: rules {', '.join(rules)}; limits {', '.join(limits)}")

    def policy_story(self, requester) -> None:
        """Steps 13-15: a small refund confirmed by the requester, one over the ceiling refused with
        finance's reason, and the per-order limit stopping a fourth refund of the same order."""
        limited, ceiling = (order_id("acme", suffix) for suffix, _ in POLICY_ORDERS)

        self.title("13. A small refund only needs the requester's confirmation")
        self.small_refund(requester, limited, "20", first=True)

        self.title("14. A refund over 5,000 is refused with finance's reason; nobody is asked")
        outcome = self.chat(requester, f"Refund {ceiling} amount 6000 because the customer returned everything")
        codes = self.result_codes(outcome.run)
        self.expect(not outcome.pending, "no confirmation was asked")
        self.expect(codes == ["POLICY_DENIED"] and "handled by finance" in (outcome.run.final_answer or ""),
                    "refused: POLICY_DENIED, with finance's reason in the answer")
        self.expect(not Refund.objects.filter(order__order_id=ceiling).exists(), "nothing was refunded")
        row = AuditEvent.objects.filter(tenant=requester.tenant, tool_name="refund_order",
                                        decision="DENIED").order_by("-occurred_at").first()
        self.expect(row is not None and row.policy_rules == ["no-refund-over-5000"],
                    "its audit row names the rule no-refund-over-5000 and the bundle version "
                    f"{row.policy_version if row else '?'}")

        self.title(f"15. A limit per order: the fourth refund of {limited} in a day is stopped")
        for amount in ("25", "30"):
            self.small_refund(requester, limited, amount)
        done = Refund.objects.filter(order__order_id=limited).count()
        self.say(f"   {done} refunds of {limited} today (the limit refunds-per-order-day allows 3)")
        outcome = self.chat(requester, f"Refund {limited} amount 15 because one more item arrived scratched")
        codes = self.result_codes(outcome.run)
        self.expect("LIMIT_EXCEEDED" in codes and not outcome.pending
                    and Refund.objects.filter(order__order_id=limited).count() == 3,
                    "stopped with LIMIT_EXCEEDED: still 3 refunds of the order, nobody was asked")

    @staticmethod
    def result_codes(run: Run) -> list[str]:
        """The result codes of the run's completed tool calls, in order."""
        return [e.payload.get("code") or "" for e in RunEvent.objects.filter(
            run=run, type=RunEvent.Type.TOOL_EXECUTION_COMPLETED).order_by("seq")]

    def small_refund(self, requester, order: str, amount: str, *, first: bool = False) -> None:
        """A refund of `amount` of `order` in a conversation of its own (one refund per order and
        conversation is the tool's idempotency key), confirmed by the requester."""
        before = Refund.objects.filter(order__order_id=order).count()
        outcome = self.chat(requester, f"Refund {order} amount {amount} because an item arrived scratched")
        pending = outcome.pending[0] if outcome.pending else None
        self.expect(pending is not None and pending.needs == "requester" and pending.token,
                    f"refund of {amount}: under 500, so the requester's own confirmation suffices"
                    if first else f"refund of {amount}: the requester confirms")
        outcome = self.chat(requester, "I confirm", conversation=outcome.run.conversation_id, token=pending.token)
        self.expect(outcome.run.status == Run.Status.COMPLETED
                    and Refund.objects.filter(order__order_id=order).count() == before + 1,
                    f"refunded {amount} of {order}, once")
