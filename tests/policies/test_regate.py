"""A bundle is judged again when a decided call is consumed: a rule added or tightened while a
request waits sends it back (the requester is told in words naming the rule, the request records
the rule and the version), a forbid added meanwhile refuses it, and a request whose rule was
removed keeps the gate it was decided under. Runs through the agent loop (the offline model) on
SQLite and PostgreSQL alike."""
from __future__ import annotations

import textwrap
import uuid

import pytest

from agentplatform.runtime import services
from agentplatform.runtime.models import Run
from approvals import approver_actions
from approvals.models import ConfirmationRequest
from audit.models import AuditEvent
from policies import selectors
from tests.policies.support import apply
from tests.tools.support import ORDER, REFUND_ORDER
from tools.catalog.models import Refund
from tools.models import Tool

pytestmark = pytest.mark.django_db

Status = ConfirmationRequest.Status


def rule(quorum: int, *, over: str = "5.00", rule_id: str = "refunds-over-5") -> str:
    """A bundle with one approval rule on refunds over `over`."""
    return textwrap.dedent(f'''\
        version: 1
        cedar: |
          @id("{rule_id}") @gate("approval") @quorum("{quorum}")
          permit (principal, action == Action::"refund_order", resource)
          when {{ context.arguments.amount.greaterThan(decimal("{over}")) }};
        ''')


FORBID = textwrap.dedent('''\
    version: 1
    cedar: |
      @id("no-refunds-this-week") @reason("Refunds are frozen during the stock count")
      forbid (principal, action == Action::"refund_order", resource);
    ''')
EMPTY = "version: 1\ncedar: ''\n"


@pytest.fixture(autouse=True)
def _refunds_need_the_requester_only(people):
    """refund_order below its CRITICAL floor as a platform operator sets it (risk HIGH, the
    requester confirms), with a written waiver; and no compiled bundle of another test (SQLite
    hands a rolled-back row's id out again)."""
    tool = Tool.objects.get(name="refund_order")
    tool.risk_override, tool.policy_override = "HIGH", "REQUESTER"
    tool.critical_floor_waiver = "Tests: the tenant's rules on the amount decide."
    tool.save()
    selectors._CACHE.clear()
    yield
    selectors._CACHE.clear()


def _refund(requester, amount: str = "10", order: str = REFUND_ORDER):
    outcome = services.chat_send(user=requester,
                                 message=f"refund {order} amount {amount} because the parcel arrived broken")
    [pending] = outcome.pending
    return outcome, pending


def _approve(request_id, *approvers, capture) -> None:
    for approver in approvers:
        with capture(execute=True):  # the run resumes on commit
            approver_actions.confirmation_approve(request_id=request_id, approver=approver)


def test_a_rule_added_while_the_requester_decides_sends_the_call_to_approvers(
        requester, approver1, approver2, django_capture_on_commit_callbacks):
    first, pending = _refund(requester)
    assert (pending.needs, bool(pending.token)) == ("requester", True)
    applied = apply(requester.tenant_id, rule(2))

    confirmed = services.chat_send(user=requester, message="I confirm", conversation_id=first.run.conversation_id,
                                   confirmation_token=pending.token)

    assert not Refund.objects.exists()
    assert confirmed.run.status == Run.Status.AWAITING_CONFIRMATION
    [again] = confirmed.pending
    assert (again.needs, again.quorum, again.token) == ("approvers", 2, None)
    assert "policy rule refunds-over-5" in again.reason and "策略规则 refunds-over-5" in again.reason
    assert again.regated["cause"] == "APPROVERS_NOW"
    request = ConfirmationRequest.objects.get(pk=pending.confirmation_id)
    assert (request.status, request.policy, request.quorum) == (Status.PENDING, "APPROVERS", 2)
    assert (request.policy_version, request.policy_rules) == (applied.version, ["refunds-over-5"])
    [told] = AuditEvent.objects.filter(confirmation_id=request.pk, status="REGATED").values_list("message", flat=True)
    assert "policy rule refunds-over-5" in told

    _approve(request.pk, approver1, approver2, capture=django_capture_on_commit_callbacks)
    assert Refund.objects.count() == 1


def test_a_quorum_raised_while_approvers_decide_waits_for_the_new_quorum(
        requester, approver1, approver2, django_capture_on_commit_callbacks):
    first_version = apply(requester.tenant_id, rule(2)).version
    run, pending = _refund(requester)
    request_id = uuid.UUID(pending.confirmation_id)
    assert (pending.needs, pending.quorum, pending.rules) == ("approvers", 2, ("refunds-over-5",))
    _approve(request_id, approver1, capture=django_capture_on_commit_callbacks)
    tightened = apply(requester.tenant_id, rule(3)).version  # the same rule, a higher quorum
    assert tightened == first_version + 1

    _approve(request_id, approver2, capture=django_capture_on_commit_callbacks)

    assert not Refund.objects.exists()
    request = ConfirmationRequest.objects.get(pk=request_id)
    assert (request.status, request.quorum) == (Status.PENDING, 3)
    assert (request.policy_version, request.policy_rules) == (tightened, ["refunds-over-5"])
    [told] = AuditEvent.objects.filter(confirmation_id=request_id, status="REGATED").values_list("message", flat=True)
    assert "needs 3 approvers and 2 of them count so far" in told and "(policy rule refunds-over-5)" in told
    assert Run.objects.get(pk=run.run.pk).status == Run.Status.AWAITING_CONFIRMATION


def test_a_rule_that_applies_only_now_is_named_when_it_raises_the_quorum(
        requester, approver1, approver2, django_capture_on_commit_callbacks):
    apply(requester.tenant_id, rule(2))
    _, pending = _refund(requester, "550")
    _approve(pending.confirmation_id, approver1, capture=django_capture_on_commit_callbacks)
    # a second rule with a higher quorum is added; the first stays
    both = rule(2).rstrip("\n") + "\n\n" + textwrap.indent(textwrap.dedent('''\
        @id("refunds-over-500") @gate("approval") @quorum("3")
        permit (principal, action == Action::"refund_order", resource)
        when { context.arguments.amount.greaterThan(decimal("500.00")) };
        '''), "  ")
    version = apply(requester.tenant_id, both).version

    _approve(pending.confirmation_id, approver2, capture=django_capture_on_commit_callbacks)

    request = ConfirmationRequest.objects.get(pk=pending.confirmation_id)
    assert (request.status, request.quorum, request.policy_version, request.policy_rules) == (
        Status.PENDING, 3, version, ["refunds-over-500"])
    assert not Refund.objects.exists()


def test_a_forbid_added_while_a_request_waits_refuses_it_with_the_rules_reason(
        requester, approver1, approver2, django_capture_on_commit_callbacks):
    apply(requester.tenant_id, rule(2))
    run, pending = _refund(requester)
    _approve(pending.confirmation_id, approver1, capture=django_capture_on_commit_callbacks)
    apply(requester.tenant_id, FORBID)

    _approve(pending.confirmation_id, approver2, capture=django_capture_on_commit_callbacks)

    assert not Refund.objects.exists()
    request = ConfirmationRequest.objects.get(pk=pending.confirmation_id)
    assert (request.status, request.outcome_code) == (Status.REFUSED, "POLICY_DENIED")
    [row] = AuditEvent.objects.filter(tool_name="refund_order", decision="DENIED")
    assert (row.status, row.message) == ("POLICY_DENIED", "Refunds are frozen during the stock count")
    assert row.policy_rules == ["no-refunds-this-week"]
    resumed = Run.objects.get(pk=run.run.pk)
    assert resumed.status == Run.Status.COMPLETED
    assert "frozen during the stock count" in resumed.final_answer


def test_a_request_whose_rule_was_removed_keeps_the_gate_it_was_decided_under(
        requester, approver1, approver2, django_capture_on_commit_callbacks):
    version = apply(requester.tenant_id, rule(2)).version
    run, pending = _refund(requester)
    assert (pending.needs, pending.quorum) == ("approvers", 2)
    apply(requester.tenant_id, EMPTY)  # the rule is gone: a new refund only needs the requester

    _approve(pending.confirmation_id, approver1, capture=django_capture_on_commit_callbacks)
    assert not Refund.objects.exists()  # one approval of two: nothing runs
    request = ConfirmationRequest.objects.get(pk=pending.confirmation_id)
    assert (request.status, request.quorum, request.policy_version, request.policy_rules) == (
        Status.PENDING, 2, version, ["refunds-over-5"])
    _, fresh = _refund(requester, "11", ORDER)  # another order (a new request for one order supersedes)
    assert (fresh.needs, fresh.rules) == ("requester", ())

    _approve(pending.confirmation_id, approver2, capture=django_capture_on_commit_callbacks)

    assert Refund.objects.count() == 1
    request.refresh_from_db()
    assert (request.status, request.policy_rules) == (Status.CONSUMED, ["refunds-over-5"])
    assert not AuditEvent.objects.filter(confirmation_id=request.pk, status="REGATED").exists()
    assert Run.objects.get(pk=run.run.pk).status == Run.Status.COMPLETED
