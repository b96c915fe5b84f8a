"""Cedar rules gate calls by their arguments: a forbid denies with its reason, a permit raises the
gate, the strongest gate wins, and every request and audit row names the version and the rules."""
from __future__ import annotations

import pytest

from approvals.models import ConfirmationRequest
from audit.models import AuditEvent
from tests.policies.support import EXAMPLE, apply, call
from tests.tools.support import REFUND_ORDER

pytestmark = pytest.mark.django_db


def test_a_refund_over_the_rule_waits_for_the_rules_quorum_and_names_the_rule(requester):
    applied = apply(requester.tenant_id, EXAMPLE)
    outcome = call(requester, "refund_order", {"order_id": REFUND_ORDER, "amount": "501.00", "reason": "damaged"})
    assert outcome.pending is not None and outcome.pending.quorum == 3
    assert outcome.result.data["rules"] == ["refunds-over-500-need-three"]
    request = ConfirmationRequest.objects.get(pk=outcome.pending.confirmation_id)
    assert (request.quorum, request.policy_version, request.policy_rules) == (3, applied.version,
                                                                               ["refunds-over-500-need-three"])
    row = AuditEvent.objects.get(confirmation_id=request.pk, decision="CONFIRMATION_REQUIRED")
    assert (row.policy_version, row.policy_rules) == (applied.version, ["refunds-over-500-need-three"])


def test_a_refund_under_the_rule_keeps_the_registry_gate(requester):
    apply(requester.tenant_id, EXAMPLE)
    outcome = call(requester, "refund_order", {"order_id": REFUND_ORDER, "amount": "20.00", "reason": "damaged"})
    request = ConfirmationRequest.objects.get(pk=outcome.pending.confirmation_id)
    assert (request.quorum, request.policy_rules) == (2, None)


def test_a_forbidden_refund_is_denied_with_the_rules_reason_and_asks_nobody(requester):
    apply(requester.tenant_id, EXAMPLE)
    outcome = call(requester, "refund_order", {"order_id": REFUND_ORDER, "amount": "5000.01", "reason": "x"})
    assert outcome.pending is None and outcome.result.code == "POLICY_DENIED"
    assert "handled by finance" in outcome.result.message
    assert not ConfirmationRequest.objects.filter(tenant_id=requester.tenant_id, tool_name="refund_order").exists()
    row = AuditEvent.objects.get(tool_call_id="call_1", decision="DENIED")
    assert row.policy_rules == ["no-refund-over-5000"]
