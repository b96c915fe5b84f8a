"""`python manage.py demo [--reset]`: migrate, seed two tenants, and play the whole governed story
through the real agent loop, printing every run event as it is stored. Exits non-zero if any step
of the story does not hold (so CI and newcomers see a broken promise, not a pretty log).

A second run keeps what administrators changed (it says what it kept); `--reset` restores the
seeded tools, whitelist and grants and says so. The story plays with orders 0001-0003 and leaves
TRY_ORDERS fresh for the chat's suggestions (docs/operations.md, "The demo"). It ends with an agent that is
not ours, governed over MCP (agentplatform.mcp_server.demo, docs/mcp.md)."""
from __future__ import annotations

import json
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from guardian.shortcuts import assign_perm

from core.errors import DomainError
from agentplatform.mcp_server.demo import McpStory
from agentplatform.runtime import services
from agentplatform.runtime.demo.policy_story import PolicyStory
from agentplatform.runtime.demo.seed import (
    DEMO_PASSWORD,
    TRY_ORDERS,
    demo_changes,
    order_id,
    platform_operator,
    reset_demo_orders,
    seed_demo,
)
from agentplatform.runtime.models import Run, RunEvent
from agentplatform.runtime.outcome import RunOutcome
from approvals import approver_actions
from audit.models import AuditEvent
from mcp_sources.demo import demo_server_register
from mcp_sources.models import McpTool
from mcp_sources.services import server_discover, tool_review
from tools.catalog.models import Cancellation, Order, Refund, StockLevel
from tools.models import Tool
from tools.services import tenant_tool_set_enabled


def clip(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters at a word boundary (a space, or after a comma or
    colon), ending with "…" when cut; a single word longer than the limit is cut inside it."""
    if len(text) <= limit:
        return text
    head = text[:limit - 1]
    cut = max(head.rfind(" "), head.rfind(",") + 1, head.rfind(":") + 1, head.rfind("，") + 1)
    return (head[:cut] if cut > limit // 2 else head).rstrip() + "…"


class Command(PolicyStory, McpStory, BaseCommand):
    help = "Seed demo data and play the governed tool-calling story end to end."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--no-migrate", action="store_true", help="Skip `migrate` (the database is ready).")
        parser.add_argument("--reset", action="store_true", help=(
            "Restore the demo's tools, whitelist, overrides and grants as seeded, undoing what "
            "administrators changed (without it, their changes are kept)."))

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["no_migrate"]:
            call_command("migrate", verbosity=0)
        kept = [] if options["reset"] else demo_changes()
        people = seed_demo(reset=options["reset"])
        reset_demo_orders()
        if options["reset"]:
            self.say(self.style.WARNING(
                "--reset: the demo's tools, whitelist, overrides, grants and members are back as seeded; "
                "changes made in the admin since were undone. / 已重置：管理后台的修改已撤销。"))
        elif kept:
            self.say(self.style.WARNING(
                "Kept the changes made in the admin since the last seed (`python manage.py demo --reset`, or "
                "`make demo ARGS=--reset`, undoes them) / 保留了管理后台的修改："))
            for change in kept:
                self.say(f"   - {change}")
        self.acme = people["acme"]
        self.globex = people["globex"]
        self.seen: dict[str, int] = {}
        self.started = AuditEvent.objects.order_by("-occurred_at").values_list("occurred_at", flat=True).first()
        try:
            self.story()
        except CommandError as error:
            if kept:
                raise CommandError(f"{error}. The admin changes kept above may be why: `python manage.py demo --reset` "
                                   "(or `make demo ARGS=--reset`) restores the demo's settings.") from error
            raise
        tries = [order_id("acme", TRY_ORDERS[k]) for k in ("cancel", "refund", "cancel_zh")]
        self.ok("The whole story held. Run `make serve`, open http://127.0.0.1:8000/ and sign in as acme-requester "
                f"(password {DEMO_PASSWORD}); orders {', '.join(tries)} are still PAID for you to try "
                "(the chat's suggestions name them). Then acme-approver1 and acme-approver2 at /approvals/, "
                "acme-admin or platform-operator at /admin/ (an approver grant waits there for a second "
                "administrator: acme-admin2), acme-auditor at /audit/ (filter, export, Verify); other agents connect at /mcp/ with an API key "
                "(docs/mcp.md). See README, \"After make demo\".")

    # -- the story ------------------------------------------------------------------------------

    def story(self) -> None:
        requester, nobody = self.acme["requester"], self.acme["nobody"]
        a1, a2 = self.acme["approver1"], self.acme["approver2"]
        cancel_id, refund_id, shipped_id = (order_id("acme", s) for s in ("0001", "0003", "0002"))

        self.title("1. Inventory question, answered from the database")
        outcome = self.chat(requester, "How many SKU-10001 are in stock in WH-HZ-01?")
        stock = StockLevel.objects.get(tenant=requester.tenant, sku="SKU-10001", warehouse_code="WH-HZ-01")
        self.expect(str(stock.available_quantity) in outcome.run.final_answer,
                    f"the answer carries the database's number {stock.available_quantity}")

        self.title("2. Cancellation needs the requester's confirmation")
        outcome = self.chat(requester, f"Please cancel order {cancel_id} because the customer changed their mind")
        self.expect(outcome.run.status == Run.Status.AWAITING_CONFIRMATION, "the run waits for confirmation")
        token = outcome.pending[0].token
        self.expect(bool(token), "the requester received a one-time token (shown here once, never to the model)")
        self.expect(Order.objects.get(tenant=requester.tenant, order_id=cancel_id).status == Order.Status.PAID,
                    "the order is unchanged before the confirmation")
        conversation = outcome.run.conversation_id
        self.say(f"   token: {token[:6]}… (truncated here; only its SHA-256 is stored)")

        self.title("3. The requester confirms with the token; the run resumes")
        outcome = self.chat(requester, "I confirm", conversation=conversation, token=token)
        self.expect(outcome.run.status == Run.Status.COMPLETED, "the resumed run completed")
        self.expect(Cancellation.objects.filter(order__order_id=cancel_id).count() == 1, "the order was cancelled once")

        self.title("4. The same token replayed is refused")
        self.refused(lambda: self.chat(requester, "I confirm again", conversation=conversation, token=token))

        self.title("5. The model repeats the cancellation: idempotent hit, no second change")
        outcome = self.chat(requester, f"Please cancel order {cancel_id} because the customer changed their mind",
                            conversation=conversation)
        self.expect(outcome.run.status == Run.Status.COMPLETED, "answered without asking again")
        self.expect(Cancellation.objects.filter(order__order_id=cancel_id).count() == 1, "still exactly one cancellation")
        self.expect(AuditEvent.objects.filter(conversation_id=conversation, decision="IDEMPOTENT_HIT").exists(),
                    "the audit trail explains the second call as an idempotent hit")

        self.title("6. A shipped order cannot be cancelled: the precheck answers before anyone is asked")
        outcome = self.chat(requester, f"Cancel order {shipped_id} because it is late")
        self.expect(not outcome.pending, "no confirmation was asked for a call that cannot succeed")
        self.expect("SHIPPED" in outcome.run.final_answer or "shipped" in outcome.run.final_answer,
                    "the answer explains that the order has shipped")

        self.title("7. A user without permissions is refused by the platform, not by model prose")
        self.refused(lambda: self.chat(nobody, f"Cancel order {refund_id} because I want to"))
        self.expect(Order.objects.get(tenant=nobody.tenant, order_id=refund_id).status == Order.Status.PAID,
                    "nothing changed")

        self.policy_story_setup()

        self.title("9. A refund over 500 waits for two approvers (acme's rule refunds-over-500-need-two)")
        outcome = self.chat(requester, f"Refund order {refund_id} because the parcel arrived damaged")
        self.expect(outcome.pending and outcome.pending[0].needs == "approvers" and outcome.pending[0].quorum == 2
                    and outcome.pending[0].token is None,
                    "a full refund (560.00, judged with the amount it would refund) waits for 2 approvers: "
                    "no token for anyone")
        self.expect("refunds-over-500-need-two" in outcome.pending[0].rules,
                    f"the request names the rule that gated it ({', '.join(outcome.pending[0].rules)})")
        request_id, run_id = outcome.pending[0].confirmation_id, outcome.run.pk

        self.title("10. The requester tries to approve their own refund")
        self.refused(lambda: approver_actions.confirmation_approve(request_id=request_id, approver=requester))
        self.title("11. An approver of another tenant cannot even see it")
        self.refused(lambda: approver_actions.confirmation_approve(request_id=request_id, approver=self.globex["approver1"]))

        self.title("12. Two approvers approve; the refund runs once")
        approver_actions.confirmation_approve(request_id=request_id, approver=a1, comment="checked the photos")
        self.say("   approver1 approved (1 of 2)")
        self.expect(Refund.objects.filter(order__order_id=refund_id).count() == 0, "nothing runs at 1 of 2")
        approver_actions.confirmation_approve(request_id=request_id, approver=a2, comment="ok")
        self.say("   approver2 approved (2 of 2): the run resumes on commit")
        self.show(Run.objects.get(pk=run_id))
        self.expect(Refund.objects.filter(order__order_id=refund_id).count() == 1, "refunded exactly once")
        self.refused(lambda: approver_actions.confirmation_approve(request_id=request_id, approver=self.acme["admin"]))

        self.policy_story(requester)

        self.title("16. The audit trail of this session")
        rows = AuditEvent.objects.filter(tenant=requester.tenant)
        if self.started:
            rows = rows.filter(occurred_at__gt=self.started)
        for e in rows.select_related("actor"):
            rules = f" rules={','.join(e.policy_rules)}" if e.policy_rules else ""
            self.say(f"   {e.occurred_at:%H:%M:%S.%f} {str(e.actor or '-'):16} {e.tool_name or '-':15} "
                     f"{e.decision:22} {e.status:24} {clip(json.dumps(e.masked_arguments, ensure_ascii=False), 70)}"
                     f"{rules}")

        self.remote_tool_story(requester)
        self.mcp_story(requester)

    def remote_tool_story(self, requester) -> None:
        """A remote tool: a local MCP server the demo starts itself, governed like a local tool."""

        self.title("17. A remote tool from an MCP server (started here over stdio), governed like a local one")
        server = demo_server_register()
        report = server_discover(server_id=server.pk)
        self.expect(not report.error, f"discovered the server's tools ({report.error or 'no error'})")
        server.refresh_from_db()
        self.say(f"   server {server.server_name} {server.server_version}, protocol {server.protocol_version}")
        track = Tool.objects.get(name="logistics__track_shipment")
        mcp_tool = McpTool.objects.get(tool=track)
        if not mcp_tool.reviewed:
            self.expect(not track.enabled and track.risk == "HIGH",
                        "a new remote tool arrives disabled and HIGH risk, whatever the server says")
            tool_review(mcp_tool_id=mcp_tool.pk, reviewer=platform_operator(), definition_hash=mcp_tool.definition_hash)
            self.say("   the platform operator reviewed its definition (hash pinned) and enabled it")
        track.refresh_from_db()
        tenant_tool_set_enabled(tenant_id=requester.tenant_id, tool_name=track.name, enabled=True)
        assign_perm("tools.use_tool", requester, track)
        self.say(f"   owner {track.owner}, version {track.version}")
        outcome = self.chat(requester, "Where is parcel SF1234567890?")
        self.expect(outcome.run.status == Run.Status.AWAITING_CONFIRMATION, "HIGH risk: the requester confirms first")
        outcome = self.chat(requester, "I confirm", conversation=outcome.run.conversation_id,
                            token=outcome.pending[0].token)
        self.expect(outcome.run.status == Run.Status.COMPLETED and "IN_TRANSIT" in outcome.run.final_answer,
                    "the remote tool ran once and the answer carries the server's status")
        row = AuditEvent.objects.filter(tool_name=track.name, decision="EXECUTED").order_by("-occurred_at").first()
        self.expect(row is not None and row.tool_owner == track.owner and row.tool_version == track.version,
                    "its audit row names the tool's owner and version")

    # -- helpers --------------------------------------------------------------------------------

    def chat(self, user, message: str, *, conversation=None, token: str | None = None) -> RunOutcome:
        self.say(f"\n   {user.username} > {message}" + ("  [with confirmation_token]" if token else ""))
        outcome = services.chat_send(user=user, message=message, conversation_id=conversation, confirmation_token=token)
        self.show(outcome.run)
        return outcome

    def show(self, run: Run) -> None:
        """Print the run's events not yet printed (including those a resume task stored)."""
        for event in RunEvent.objects.filter(run=run, seq__gt=self.seen.get(str(run.pk), 0)).order_by("seq"):
            self.seen[str(run.pk)] = event.seq
            self.say(f"   [{event.seq:>2}] {event.type:25} {clip(json.dumps(event.payload, ensure_ascii=False), 150)}")

    def refused(self, action) -> None:
        try:
            action()
        except DomainError as error:
            self.say(f"   refused: {error.code} ({error.message})")
            return
        raise CommandError("expected a refusal, but the action went through")

    def expect(self, condition: Any, what: str) -> None:
        if not condition:
            raise CommandError(f"story broken: {what}")
        self.say(self.style.SUCCESS(f"   ✓ {what}"))

    def title(self, text: str) -> None:
        self.say("\n" + self.style.MIGRATE_HEADING(text))

    def say(self, text: str) -> None:
        self.stdout.write(text)

    def ok(self, text: str) -> None:
        self.stdout.write("\n" + self.style.SUCCESS(text))
