"""A stateful property test of the decision state machine: Hypothesis drives gated calls through
the platform's public services on PostgreSQL, in any order, and checks after every step that

1. a request ends in exactly one final state and never leaves it;
2. nothing executes without its quorum of standing approvals under the policy in force at
   consume time (and nothing at all under a DENY policy);
3. at most one execution per binding: per request, per idempotency key, and in the business
   tables (cancellations, refunds) against the EXECUTED audit rows;
4. every decision has its audit row, every refused decision too, and the tenant's audit chain
   verifies;
5. the requester's view (GET /api/v1/my-requests/, GET /api/v1/runs/{id}/) and what the model is
   told (the run's tool messages) agree with the stored outcome.

The rules are the people and the platform acting: the offline model proposes a cancellation
(HIGH: the requester confirms with the token) or a refund (CRITICAL: two approvers) of one of a
few fresh orders, or proposes again (a newer request supersedes the older one); the requester
confirms, declines, withdraws, or tries to approve their own call (refused); approvers approve
(with the arguments hash they read, or a stale one), reject, edit within the tool's edit rule (or
beyond it: refused), respond with guidance; the deadline passes; someone cancels the run; the
policy of a tool is tightened (or put back) while a call waits; the run is resumed (the consume)
by one delivery, or by two real threads with their own PostgreSQL connections at once.

The oracle is written here from the documented rules (docs/decisions.md, docs/approvals.md), not
by calling the selectors that the views use, so a view that drifts from the stored truth fails.

Bounded in the normal suite (HYPOTHESIS_STATEFUL_EXAMPLES, default 15 examples of at most
HYPOTHESIS_STATEFUL_STEPS, default 12, steps); set HYPOTHESIS_STATEFUL_EXAMPLES=500 for a hunt.
"""
from __future__ import annotations

import datetime
import json
import os
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal

import pytest
from django.core.cache import cache
from guardian.shortcuts import assign_perm
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant, precondition, rule,
                                 run_state_machine_as_test)
from rest_framework.test import APIClient

from core import clock
from core.errors import DomainError
from agentplatform.runtime import services as runtime
from agentplatform.runtime.models import Run, RunEvent
from agentplatform.runtime.resume import resume_run
from agentplatform.tenancy.models import Tenant, User
from approvals import amendments
from approvals import approver_actions, expiry, requester_actions
from approvals.errors import ApprovalForbidden
from approvals.models import Approval, ConfirmationRequest
from audit.verify_reference import verify_tenant
from audit.models import AuditEvent
from tests.tools.support import race, resume_not_enqueued
from tools.catalog.models import Cancellation, Order, Refund
from tools.models import ApprovalPolicy, RiskLevel, TenantToolPolicy, Tool
from tools.policy import effective_policy
from tools.registry import registry

pytestmark = pytest.mark.postgres

EXAMPLES = int(os.environ.get("HYPOTHESIS_STATEFUL_EXAMPLES", "15"))
STEPS = int(os.environ.get("HYPOTHESIS_STATEFUL_STEPS", "12"))

Status = ConfirmationRequest.Status
FINAL = {Status.CONSUMED, Status.EXPIRED, Status.CANCELLED, Status.SUPERSEDED, Status.REFUSED, Status.RESPONDED,
         Status.WITHDRAWN}
SUCCESS_CODES = ("", "OK", "IDEMPOTENT_HIT")
TOOLS = ("cancel_order", "refund_order")
# The audit decisions that end a request (one per request at most); REFUSED only when the
# platform refused it at consume time (actor None), not a person's refused attempt.
ENDINGS = {"EXPIRED", "REJECTED", "RESPONDED", "WITHDRAWN", "CANCELLED", "EXECUTED", "FAILED", "IDEMPOTENT_HIT"}
# The tool's policy as the regate rule leaves it: (tenant risk override, tenant quorum, global policy override).
TIGHTENINGS = {
    "cancel_needs_approvers": ("cancel_order", RiskLevel.CRITICAL, None, ""),
    "refund_quorum_3": ("refund_order", "", 3, ""),
    "cancel_denied": ("cancel_order", "", None, ApprovalPolicy.DENY),
    "refund_denied": ("refund_order", "", None, ApprovalPolicy.DENY),
}

_orders = iter(range(10**7, 10**8))
# Figures of the last run (examples, steps, rules used), printed at the end and, with
# HYPOTHESIS_STATEFUL_STATS=path, written there as JSON for a long hunt's report.
STATS: Counter = Counter()


@dataclass
class Tracked:
    """One gated call this example proposed, and what the example knows of it."""

    id: uuid.UUID
    run_id: uuid.UUID
    tool: str
    order_id: str
    token: str | None
    seen: list[str] = field(default_factory=list)  # statuses after each step
    final: tuple[str, str] | None = None  # (status, outcome_code) when it first ended


def _fresh_requester(like: User) -> User:
    """A new acme requester with the demo requester's permissions (catalog, use_tool on the two tools)."""
    user = User.objects.create_user(username=f"acme-prop-{uuid.uuid4().hex[:12]}", password="x", tenant=like.tenant)
    user.user_permissions.set(like.user_permissions.all())
    for tool in Tool.objects.filter(name__in=TOOLS):
        assign_perm("tools.use_tool", user, tool)
    return user


def _fresh_order(tenant: Tenant) -> str:
    """A PAID acme order of CNY 200 that no earlier example touched (A + 12 digits)."""
    order_id = f"A2099{next(_orders):08d}"
    Order.objects.create(tenant=tenant, order_id=order_id, status=Order.Status.PAID, amount=Decimal("200.00"),
                         customer_name="Property Test", customer_phone="13800000000", shipping_address="Hangzhou")
    return order_id


def _expected_outcome(request: ConfirmationRequest) -> str:
    """The outcome people must be shown, from the stored status (docs/decisions.md)."""
    code = request.outcome_code or ""
    if request.status == Status.EXPIRED or (request.status == Status.PENDING and request.expires_at <= clock.now()):
        return "EXPIRED"
    if request.status == Status.CONSUMED:
        return "EXECUTED" if code in SUCCESS_CODES else "FAILED"
    if request.status == Status.CANCELLED:
        return "CANCELLED" if code == "RUN_ENDED" else "REJECTED"
    return str(request.status)


def _expected_model_code(request: ConfirmationRequest) -> str:
    """The code of the tool message the model must read for a request that ended."""
    code = request.outcome_code or ""
    return {Status.CONSUMED: "OK" if code in SUCCESS_CODES else code, Status.CANCELLED: "REJECTED",
            Status.SUPERSEDED: "SUPERSEDED", Status.RESPONDED: "APPROVER_GUIDANCE", Status.WITHDRAWN: "WITHDRAWN",
            Status.REFUSED: code or "REFUSED", Status.EXPIRED: "CONFIRMATION_EXPIRED"}[request.status]


def _timed(check):
    """Add the invariant's wall time to STATS (seconds per invariant, for the hunt's figures)."""
    def timed(self):
        started = time.monotonic()
        try:
            return check(self)
        finally:
            STATS[f"s {check.__name__}"] += time.monotonic() - started
    timed.__name__, timed.__doc__ = check.__name__, check.__doc__
    return timed


class DecisionMachine(RuleBasedStateMachine):
    """The decision state machine of gated calls, driven through the public services."""

    people: dict = {}

    def __init__(self) -> None:
        super().__init__()
        cache.clear()  # API throttle counters: every example starts from zero
        acme = self.people["acme"]
        self.tenant = acme["requester"].tenant
        self.requester = _fresh_requester(acme["requester"])  # "My requests" lists this example's only
        self.approvers = [acme["approver1"], acme["approver2"], acme["approver3"]]
        self.admin = acme["admin"]
        self.orders = [_fresh_order(self.tenant) for _ in range(2)]
        self.tracked: list[Tracked] = []
        self.refused_audits = 0  # refused attempts this example made, each must leave a REFUSED row
        # The tenant's audit rows this example writes: those after the chain's head now.
        self.audit_floor = AuditEvent.objects.filter(tenant=self.tenant).order_by("-chain_seq") \
            .values_list("chain_seq", flat=True).first() or 0
        self.checked_executions: set[int] = set()
        self.policy_now: dict[str, tuple] = {}

    # -- helpers ------------------------------------------------------------------------------

    def _fresh(self, item: Tracked) -> ConfirmationRequest:
        return ConfirmationRequest.objects.get(pk=item.id)

    def _user(self, user) -> User:
        return User.objects.select_related("tenant").get(pk=user.pk)  # no permission cache carried over

    def _pick(self, index: int, *, where=lambda r: True) -> Tracked | None:
        candidates = [t for t in self.tracked if where(self._fresh(t))]
        return candidates[index % len(candidates)] if candidates else None

    def _decide(self, item: Tracked, act, *, resume: bool) -> tuple[ConfirmationRequest | None, DomainError | None]:
        """Run one decision; return (request after it, the refusal if refused). A decision that
        succeeded must have found the request open; a refused one changes nothing (an expired
        request may be marked EXPIRED by the refusal's own sweep)."""
        before = self._fresh(item)
        was_open = before.status == Status.PENDING and before.expires_at > clock.now()
        audits_before = AuditEvent.objects.filter(confirmation_id=item.id, decision="REFUSED").count()
        try:
            if resume:
                act()
            else:
                with resume_not_enqueued():
                    act()
        except DomainError as error:
            after = self._fresh(item)
            if after.status != before.status:
                assert (before.status, after.status) == (Status.PENDING, Status.EXPIRED), (before.status, after.status)
            refused = AuditEvent.objects.filter(confirmation_id=item.id, decision="REFUSED").count()
            if error.code == "CONFIRMATION_INVALID" and refused == audits_before:
                # A token that matches no open request (void after a withdrawal or a regate) names
                # no request: its refusal is sampled per actor and code (audit.events.record_sampled).
                assert AuditEvent.objects.filter(tenant_id=before.tenant_id, decision="REFUSED",
                                                 status=error.code, confirmation_id=None).exists()
            else:
                assert refused == audits_before + 1, f"a refused decision ({error.code}) left no REFUSED audit row"
            return after, error
        assert was_open, f"a decision succeeded on a request that was {before.status} (expires {before.expires_at})"
        return self._fresh(item), None

    # -- rules: the model proposes ------------------------------------------------------------

    def _propose(self, tool: str, order_id: str) -> None:
        if tool == "cancel_order":
            message = f"cancel {order_id} because the customer changed their mind"
        else:
            message = f"refund {order_id} amount 50 because the parcel arrived damaged"
        outcome = runtime.chat_send(user=self.requester, message=message)
        for pending in outcome.pending:
            self.tracked.append(Tracked(id=uuid.UUID(pending.confirmation_id), run_id=outcome.run.pk, tool=pending.tool,
                                        order_id=order_id, token=pending.token))

    @initialize(tool=st.sampled_from(TOOLS), order=st.integers(0, 1))
    def first_proposal(self, tool, order):
        self._propose(tool, self.orders[order])

    @rule(tool=st.sampled_from(TOOLS), order=st.integers(0, 1))
    def propose(self, tool, order):
        self._propose(tool, self.orders[order])

    @precondition(lambda self: self.tracked)
    @rule(pick=st.integers(0, 50))
    def supersede(self, pick):
        """The model proposes the same action again (a new run): the older open request is superseded."""
        item = self.tracked[pick % len(self.tracked)]
        self._propose(item.tool, item.order_id)

    # -- rules: the requester -----------------------------------------------------------------

    @precondition(lambda self: any(t.token for t in self.tracked))
    @rule(pick=st.integers(0, 50), resume=st.booleans(), decline=st.booleans())
    def confirm(self, pick, resume, decline):
        with_token = [t for t in self.tracked if t.token]
        item = with_token[pick % len(with_token)]
        user = self._user(self.requester)
        if decline:
            self._decide(item, lambda: requester_actions.confirmation_cancel(token=item.token, user=user), resume=resume)
        else:
            self._decide(item, lambda: requester_actions.confirmation_confirm(token=item.token, user=user), resume=resume)

    @precondition(lambda self: self.tracked)
    @rule(pick=st.integers(0, 50), resume=st.booleans())
    def withdraw(self, pick, resume):
        item = self.tracked[pick % len(self.tracked)]
        user = self._user(self.requester)
        self._decide(item, lambda: requester_actions.confirmation_withdraw(request_id=item.id, requester=user,
                                                                    reason="not needed any more"), resume=resume)

    @precondition(lambda self: self.tracked)
    @rule(pick=st.integers(0, 50))
    def requester_approves_own_call(self, pick):
        item = self.tracked[pick % len(self.tracked)]
        before = self._fresh(item)
        user = self._user(self.requester)
        _, error = self._decide(item, lambda: approver_actions.confirmation_approve(request_id=item.id, approver=user),
                                resume=True)
        assert error is not None, "the requester approved their own call"
        if before.status == Status.PENDING and before.expires_at > clock.now():
            assert isinstance(error, ApprovalForbidden), error

    @precondition(lambda self: self.tracked)
    @rule(pick=st.integers(0, 50), resume=st.booleans(), everyone=st.booleans())
    def decide_as_asked(self, pick, resume, everyone):
        """The people the card asks for say yes: the requester confirms with the token, or the
        next approver who has not decided approves the arguments they read (`everyone`: each
        approver in turn until the request is no longer pending)."""
        item = self.tracked[pick % len(self.tracked)]
        request = self._fresh(item)
        if request.policy == ConfirmationRequest.Policy.REQUESTER and item.token:
            user = self._user(self.requester)
            self._decide(item, lambda: requester_actions.confirmation_confirm(token=item.token, user=user), resume=resume)
            return
        for approver in self.approvers:
            request = self._fresh(item)
            if request.status != Status.PENDING or Approval.objects.filter(
                    request=request, revision=request.revision, approver_id=approver.pk).exists():
                continue
            user = self._user(approver)
            self._decide(item, lambda: approver_actions.confirmation_approve(
                request_id=item.id, approver=user, arguments_hash=request.arguments_hash), resume=resume)
            if not everyone:
                return

    # -- rules: approvers ---------------------------------------------------------------------

    @precondition(lambda self: self.tracked)
    @rule(pick=st.integers(0, 50), who=st.integers(0, 2), resume=st.booleans(), stale=st.booleans())
    def approve(self, pick, who, resume, stale):
        item = self.tracked[pick % len(self.tracked)]
        request = self._fresh(item)
        seen = request.original_arguments_hash if stale and request.revision else request.arguments_hash
        user = self._user(self.approvers[who])
        _, error = self._decide(item, lambda: approver_actions.confirmation_approve(request_id=item.id, approver=user,
                                                                            arguments_hash=seen), resume=resume)
        if seen != request.arguments_hash:
            assert error is not None, "an approval of arguments that were edited since was counted"

    @precondition(lambda self: self.tracked)
    @rule(pick=st.integers(0, 50), who=st.integers(0, 2), resume=st.booleans())
    def reject(self, pick, who, resume):
        item = self.tracked[pick % len(self.tracked)]
        user = self._user(self.approvers[who])
        self._decide(item, lambda: approver_actions.confirmation_reject(request_id=item.id, approver=user,
                                                                reason="no photos of the damage"), resume=resume)

    @precondition(lambda self: self.tracked)
    @rule(pick=st.integers(0, 50), who=st.integers(0, 2), amount=st.sampled_from(["10", "49.99", "50", "80"]),
          resume=st.booleans())
    def edit(self, pick, who, amount, resume):
        """An approver lowers the refund (allowed), keeps it (unchanged: refused) or raises it
        above the requester's (refused), or edits a cancellation's reason (refused while the
        requester confirms it; allowed once a regate sent cancellations to approvers)."""
        item = self.tracked[pick % len(self.tracked)]
        request = self._fresh(item)
        arguments = dict(request.arguments)
        if item.tool == "refund_order":
            arguments["amount"] = amount
        else:
            arguments["reason"] = f"edited reason {amount}"
        user = self._user(self.approvers[who])
        after, error = self._decide(item, lambda: amendments.confirmation_edit(
            request_id=item.id, editor=user, arguments=arguments, base_arguments_hash=request.arguments_hash),
            resume=resume)
        if error is None:
            assert after.status == Status.PENDING and after.revision == request.revision + 1
            assert after.policy == ConfirmationRequest.Policy.APPROVERS, after.policy  # never a requester's own call
            if item.tool == "refund_order":
                assert Decimal(after.arguments["amount"]) <= Decimal("50"), after.arguments
            else:
                assert after.arguments["reason"] == arguments["reason"], after.arguments

    @precondition(lambda self: self.tracked)
    @rule(pick=st.integers(0, 50), who=st.integers(0, 2), resume=st.booleans())
    def respond(self, pick, who, resume):
        item = self.tracked[pick % len(self.tracked)]
        user = self._user(self.approvers[who])
        self._decide(item, lambda: amendments.confirmation_respond(request_id=item.id, approver=user,
                                                                  guidance="ask the customer for photos first"),
                     resume=resume)

    # -- rules: time, the run, the policy -----------------------------------------------------

    @precondition(lambda self: self.tracked)
    @rule(pick=st.integers(0, 50), resume=st.booleans())
    def expire(self, pick, resume):
        """The deadline of one request passes and the sweep runs (a decided request never expires)."""
        item = self.tracked[pick % len(self.tracked)]
        before = self._fresh(item)
        ConfirmationRequest.objects.filter(pk=item.id).update(expires_at=clock.now() - datetime.timedelta(seconds=1))
        if resume:
            expired = expiry.confirmations_expire()
        else:
            with resume_not_enqueued():
                expired = expiry.confirmations_expire()
        after = self._fresh(item)
        if before.status == Status.PENDING:
            assert item.id in expired and after.status == Status.EXPIRED
        else:
            assert item.id not in expired and after.status == before.status

    @precondition(lambda self: self.tracked)
    @rule(pick=st.integers(0, 50), by_admin=st.booleans())
    def cancel_run(self, pick, by_admin):
        item = self.tracked[pick % len(self.tracked)]
        actor = self._user(self.admin if by_admin else self.requester)
        try:
            runtime.run_cancel(run_id=item.run_id, actor=actor, reason="changed plans")
        except DomainError as error:
            assert error.code == "RUN_FINISHED", error.code
            return
        for t in self.tracked:
            if t.run_id == item.run_id:
                assert self._fresh(t).status not in (Status.PENDING, Status.CONFIRMED)

    @rule(change=st.sampled_from(sorted(TIGHTENINGS) + ["lapse_approver1", "restore"]))
    def regate(self, change):
        """Tighten a tool's policy (tenant override, global DENY) or let an approver lapse, while
        calls wait; or put everything back (a looser policy never lowers what was asked)."""
        if change == "restore":
            _restore_policies(self.people)
            return
        if change == "lapse_approver1":
            User.objects.filter(pk=self.approvers[0].pk).update(is_active=False)
            return
        tool, risk, quorum, policy = TIGHTENINGS[change]
        row = Tool.objects.get(name=tool)
        if policy:
            Tool.objects.filter(pk=row.pk).update(policy_override=policy)
        else:
            TenantToolPolicy.objects.update_or_create(
                tenant=self.tenant, tool=row, defaults={"risk_override": risk, "quorum": quorum, "enabled": True})

    @precondition(lambda self: self.tracked)
    @rule(pick=st.integers(0, 50))
    def consume(self, pick):
        """One delivery of the resume task: the decided calls of the run are consumed and run."""
        item = self.tracked[pick % len(self.tracked)]
        resume_run(str(item.run_id))

    @precondition(lambda self: self.tracked)
    @rule(pick=st.integers(0, 50))
    def racing_consume(self, pick):
        """Two deliveries of the resume task at once, each in its own thread and connection."""
        item = self.tracked[pick % len(self.tracked)]
        results = race(2, lambda _: str(item.run_id), resume_run)
        assert not [r for r in results if isinstance(r, BaseException)], results
        assert Counter(results)["resumed"] + Counter(results)["recovered"] <= 1, results

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    @_timed
    def one_final_state_never_left(self):
        STATS["checks"] += 1
        for item in self.tracked:
            request = self._fresh(item)
            item.seen.append(request.status)
            if item.final is not None:
                assert (request.status, request.outcome_code) == item.final, \
                    f"{item.id} left its final state {item.final} for {request.status} (history {item.seen})"
            elif request.status in FINAL:
                item.final = (request.status, request.outcome_code)
            endings = [a for a in AuditEvent.objects.filter(confirmation_id=item.id).values_list("decision", "actor_id",
                                                                                                 "status")
                       if a[0] in ENDINGS or (a[0] == "REFUSED" and a[1] is None)]
            endings = [a for a in endings if not (a[0] == "CANCELLED" and a[2] == "RUN_CANCELLED")]
            assert len(endings) <= 1, f"{item.id} ended more than once: {endings} (history {item.seen})"
            if request.status in FINAL:
                assert len(endings) == 1, f"{item.id} is {request.status} without its ending audited: {endings}"

    @invariant()
    @_timed
    def nothing_executes_without_its_quorum(self):
        executed = AuditEvent.objects.filter(tenant=self.tenant, chain_seq__gt=self.audit_floor, decision="EXECUTED",
                                             confirmation_id__isnull=False).exclude(id__in=self.checked_executions)
        for row in executed:
            self.checked_executions.add(row.id)
            request = ConfirmationRequest.objects.select_related("tool").get(pk=row.confirmation_id)
            assert request.status == Status.CONSUMED, (request.pk, request.status)
            spec = registry.get(request.tool_name)
            tool = Tool.objects.get(pk=request.tool_id)
            in_force = effective_policy(spec, tool, TenantToolPolicy.objects.filter(tenant_id=request.tenant_id,
                                                                                    tool=tool).first())
            assert in_force.policy != ApprovalPolicy.DENY, f"{request.pk} executed under a DENY policy"
            rank = {ApprovalPolicy.NONE: 0, "REQUESTER": 1, "APPROVERS": 2}
            if rank[in_force.policy] > rank[request.policy]:
                needed, quorum = in_force.policy, in_force.quorum
            elif in_force.policy == "APPROVERS" and request.policy == "APPROVERS":
                needed, quorum = "APPROVERS", max(in_force.quorum, request.quorum)
            else:
                needed, quorum = request.policy, request.quorum
            if needed == "REQUESTER":
                assert request.decided_by_id == request.user_id, \
                    f"{request.pk} ran without its requester's confirmation (decided by {request.decided_by_id})"
                continue
            counted = [a for a in Approval.objects.filter(request=request, revision=request.revision,
                                                          decision__in=(Approval.Decision.APPROVE,
                                                                        Approval.Decision.EDIT))
                       if _stands(a.approver_id, request)]
            approvers = {a.approver_id for a in counted}
            editors = {a.approver_id for a in counted if a.decision == Approval.Decision.EDIT}
            assert len(approvers) >= quorum, \
                f"{request.pk} ran with {len(approvers)} standing approvals of {quorum} ({in_force})"
            assert approvers - editors, f"{request.pk} ran on its editor's approval alone"

    @invariant()
    @_timed
    def at_most_one_execution_per_binding(self):
        rows = AuditEvent.objects.filter(tenant=self.tenant, chain_seq__gt=self.audit_floor, decision="EXECUTED")
        per_request = Counter(rows.exclude(confirmation_id=None).values_list("confirmation_id", flat=True))
        assert all(n == 1 for n in per_request.values()), per_request
        per_key = Counter(k for k in rows.values_list("idempotency_key", flat=True) if k)
        assert all(n == 1 for n in per_key.values()), per_key
        for order_id in self.orders:
            cancellations = Cancellation.objects.filter(order__tenant=self.tenant, order__order_id=order_id).count()
            assert cancellations <= 1, f"{order_id} cancelled {cancellations} times"
        refunds = Refund.objects.filter(order__tenant=self.tenant, order__order_id__in=self.orders).count()
        executed = {t: 0 for t in TOOLS}
        for request in ConfirmationRequest.objects.filter(pk__in=[t.id for t in self.tracked]):
            if request.status == Status.CONSUMED and request.outcome_code in ("", "OK"):
                executed[request.tool_name] += 1
        assert refunds == executed["refund_order"], (refunds, executed)
        cancelled = Cancellation.objects.filter(order__tenant=self.tenant, order__order_id__in=self.orders).count()
        assert cancelled == executed["cancel_order"], (cancelled, executed)
        mine = set(str(t.id) for t in self.tracked)
        for tool in TOOLS:
            audited = rows.filter(tool_name=tool, confirmation_id__in=mine).count()
            assert audited == executed[tool], (tool, audited, executed)

    @invariant()
    @_timed
    def every_decision_is_audited_and_the_chain_verifies(self):
        for item in self.tracked:
            request = self._fresh(item)
            audits = list(AuditEvent.objects.filter(confirmation_id=item.id).values_list("decision", "actor_id",
                                                                                         "status"))
            decisions = Counter((d, a) for d, a, _ in audits)
            for approval in Approval.objects.filter(request_id=item.id):
                decision = {"APPROVE": "APPROVED", "REJECT": "REJECTED", "EDIT": "EDITED",
                            "RESPOND": "RESPONDED"}[approval.decision]
                assert decisions[(decision, approval.approver_id)] >= 1, \
                    f"{approval.decision} of approver {approval.approver_id} on {item.id} not audited: {audits}"
            # (A run cancelled after its call was confirmed names its canceller in decided_by.)
            if request.confirmed_at and request.decided_by_id == request.user_id and request.outcome_code != "RUN_ENDED":
                assert decisions[("CONFIRMED", request.user_id)] == 1, audits
            if request.status == Status.CANCELLED and request.decided_by_id == request.user_id \
                    and request.outcome_code != "RUN_ENDED":
                assert decisions[("CANCELLED", request.user_id)] == 1, audits
            if request.status == Status.SUPERSEDED:
                assert ("CANCELLED", None, "SUPERSEDED") in audits, audits
            if request.status == Status.EXPIRED:
                assert decisions[("EXPIRED", None)] == 1, audits
            if request.status == Status.CANCELLED and request.outcome_code == "RUN_ENDED":
                assert ("CANCELLED", request.decided_by_id, "RUN_ENDED") in audits, audits
            if request.status == Status.REFUSED:
                assert ("REFUSED", None, request.outcome_code) in audits, audits
            if request.status == Status.CONSUMED:
                ran = {"EXECUTED", "FAILED", "IDEMPOTENT_HIT"}
                assert any(d in ran for d, _, _ in audits), audits
        report = verify_tenant(self.tenant)
        assert report.ok, report.problem

    @invariant()
    @_timed
    def the_requester_and_the_model_are_told_the_stored_outcome(self):
        if not self.tracked:
            return
        api = APIClient()
        api.force_authenticate(self._user(self.requester))
        shown, url, wanted = {}, "/api/v1/my-requests/", {str(t.id) for t in self.tracked}
        while url and not wanted <= set(shown):
            page = api.get(url)
            assert page.status_code == 200, page.content
            body = page.json()
            shown.update({r["id"]: r for r in body["results"]})
            url = body.get("next")
        for item in self.tracked:
            request = self._fresh(item)
            mine = shown[str(item.id)]
            assert mine["outcome"] == _expected_outcome(request), (mine["outcome"], request.status,
                                                                    request.outcome_code, item.seen)
            assert mine["outcome_code"] == (request.outcome_code or "")
        runs = {t.run_id for t in self.tracked}
        for run_id in runs:
            run = Run.objects.get(pk=run_id)
            told = api.get(f"/api/v1/runs/{run_id}/")
            assert told.status_code == 200, told.content
            told = told.json()
            assert told["status"] == run.status
            waiting = {p["confirmation_id"] for p in told.get("pending") or []}
            stored_waiting = set((run.state.get("pending") or {}).values())
            if run.status != Run.Status.CANCELLED:  # a cancelled run still lists them: see the regression tests
                stored_waiting = stored_waiting if run.status == Run.Status.AWAITING_CONFIRMATION else set()
            assert waiting == stored_waiting, (waiting, stored_waiting)
            outcomes = {d["confirmation_id"]: d["outcome"] for d in told["decisions"]}
            for item in [t for t in self.tracked if t.run_id == run_id]:
                request = self._fresh(item)
                open_now = request.status == Status.PENDING and request.expires_at > clock.now()
                assert outcomes[str(item.id)] == _expected_outcome(request), (outcomes, request.status, item.seen)
                if run.status == Run.Status.AWAITING_CONFIRMATION:
                    # Waiting for it while it is open; a decided call stays listed until the run resumes.
                    assert not open_now or str(item.id) in waiting, (request.status, waiting)
                else:
                    assert request.status not in (Status.PENDING, Status.CONFIRMED), \
                        f"run {run_id} is {run.status} while its request {item.id} is {request.status}"
                answers = [json.loads(m["content"]) for m in run.state.get("messages", [])
                           if m.get("role") == "tool" and m.get("tool_call_id") == request.tool_call_id]
                assert len(answers) <= 1, answers
                if run.status == Run.Status.COMPLETED:
                    assert len(answers) == 1, f"the model was never told how {item.id} ended"
                if answers:
                    assert request.status in FINAL, (request.status, answers)
                    code = "OK" if answers[0]["success"] else answers[0]["code"]
                    assert code == _expected_model_code(request), (code, request.status, request.outcome_code,
                                                                   item.seen)
                # The requester's event stream says the same, once.
                events = [e.payload for e in RunEvent.objects.filter(run_id=run_id,
                                                                     type=RunEvent.Type.TOOL_EXECUTION_COMPLETED)
                          if e.payload.get("tool_call_id") == request.tool_call_id]
                assert len(events) == len(answers), (events, answers)
                for event in events:
                    code = "OK" if event.get("success") else event.get("code")
                    assert code == _expected_model_code(request), (event, request.status, request.outcome_code)

    def teardown(self):
        STATS["examples"] += 1
        STATS["requests"] += len(self.tracked)
        STATS.update(f"ended {self._fresh(t).status}" for t in self.tracked)
        _restore_policies(self.people)


def _stands(approver_id: int, request: ConfirmationRequest) -> bool:
    """Whether an approver's decision counts now: an active person of the tenant, not the
    requester, holding approve_tool on the tool (the demo approvers all predate every request)."""
    user = User.objects.get(pk=approver_id)
    return (user.is_active and not user.is_service_account and user.tenant_id == request.tenant_id
            and approver_id != request.user_id and user.has_perm("tools.approve_tool", request.tool))


def _restore_policies(people) -> None:
    """Put the demo policies back: no overrides, every demo approver active."""
    tenant = people["acme"]["requester"].tenant
    Tool.objects.filter(name__in=TOOLS).update(policy_override="")
    TenantToolPolicy.objects.filter(tenant=tenant, tool__name__in=TOOLS).update(risk_override="", quorum=None)
    User.objects.filter(pk__in=[people["acme"][p].pk for p in ("approver1", "approver2", "approver3")]) \
        .update(is_active=True)


def _third_approver(people) -> User:
    """A third acme approver (in the approvers group before any request), so a quorum of 3 can be met."""
    acme = people["acme"]
    user = User.objects.create_user(username="acme-approver3", password="x", tenant=acme["approver1"].tenant)
    user.groups.add(*acme["approver1"].groups.all())
    return user


def test_the_decision_state_machine_keeps_its_invariants(transactional_db, people):
    people["acme"]["approver3"] = _third_approver(people)
    DecisionMachine.people = people
    STATS.clear()
    started = time.monotonic()
    try:
        run_state_machine_as_test(DecisionMachine, settings=settings(
            max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None,
            suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.reuse, Phase.generate,
                                                             Phase.target, Phase.shrink]))
    finally:
        STATS["seconds"] = round(time.monotonic() - started)
        STATS["steps"] = STATS["checks"] - STATS["examples"]  # invariants run once before the first step
        print(f"decision state machine: {dict(STATS)}")
        if os.environ.get("HYPOTHESIS_STATEFUL_STATS"):
            with open(os.environ["HYPOTHESIS_STATEFUL_STATS"], "w") as out:
                json.dump(dict(STATS), out, indent=1, sort_keys=True)
    # The invariants are asserted inside the machine after every step; here, that the machine really
    # ran: every example proposed at least one gated call, and the examples took steps.
    assert STATS["examples"] >= 1
    assert STATS["requests"] >= STATS["examples"], "an example ended without proposing a gated call"
    assert STATS["steps"] > 0, "no example took a step after its first proposal"
