"""Stale edits race on PostgreSQL: real concurrent API clients, lined up on a
barrier. Of many edits made on the same arguments exactly one wins; an approval and an edit of
the same arguments never both count; a withdrawal racing approvals leaves one ending; whatever
wins, the refund runs at most once and with the arguments that were approved."""
from __future__ import annotations

from collections import Counter
from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from agentplatform.runtime import services
from approvals.models import Approval, ConfirmationRequest
from audit.models import AuditEvent
from tests.api.conftest import REFUND_ORDER, authorization_header
from tests.tools.support import race
from tools.catalog.models import Refund

pytestmark = pytest.mark.postgres


def _client(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=authorization_header(user))
    return client


def _pending_refund(requester) -> ConfirmationRequest:
    outcome = services.chat_send(user=requester, message=f"Refund order {REFUND_ORDER} because it arrived damaged")
    return ConfirmationRequest.objects.get(pk=outcome.pending[0].confirmation_id)


def _approvers(people, n: int):
    """n approvers of acme: the two demo approvers and more members of their group."""
    from agentplatform.tenancy.models import User

    acme = people["acme"]
    found = [acme["approver1"], acme["approver2"]]
    groups = list(acme["approver1"].groups.all())
    for i in range(len(found), n):
        user = User.objects.create_user(username=f"approver_extra_{i}", password="x", tenant=acme["approver1"].tenant)
        user.groups.add(*groups)
        found.append(user)
    return found[:n]


def test_of_many_stale_edits_exactly_one_wins(transactional_db, people, requester):
    editors = _approvers(people, 6)  # approvers before the request: only their decisions count
    request = _pending_refund(requester)
    base = request.arguments_hash

    results = race(len(editors), lambda i: (_client(editors[i]), f"{10 + i}"),
                   lambda state: state[0].post(f"/api/v1/approvals/{request.pk}/edit/", {
                       "arguments": {"order_id": REFUND_ORDER, "reason": "it arrived damaged", "amount": state[1]},
                       "base_arguments_hash": base}, format="json"))

    assert not [r for r in results if isinstance(r, BaseException)], results
    codes = Counter(r.status_code for r in results)
    assert codes == {200: 1, 409: len(editors) - 1}, codes
    assert {r.json()["code"] for r in results if r.status_code == 409} == {"ARGUMENTS_CHANGED"}
    [winner] = [r.json() for r in results if r.status_code == 200]
    request.refresh_from_db()
    assert (request.revision, request.arguments_hash) == (1, winner["arguments_hash"])
    assert request.masked_arguments["amount"] == winner["masked_arguments"]["amount"]
    assert Approval.objects.filter(request=request, decision="EDIT").count() == 1
    assert AuditEvent.objects.filter(decision="EDITED", confirmation_id=request.pk).count() == 1


def test_an_approval_and_an_edit_of_the_same_arguments_never_both_count(transactional_db, people, requester):
    # given: approver1 approved the full refund (1 of 2); approver2 approves and a third approver
    # edits the amount, both on the arguments they read, at the same moment
    approver1, approver2, editor = _approvers(people, 3)
    request = _pending_refund(requester)
    base = request.arguments_hash
    assert _client(approver1).post(f"/api/v1/approvals/{request.pk}/approve/", {"arguments_hash": base},
                                   format="json").status_code == 200

    def act(state):
        kind, client = state
        if kind == "approve":
            return kind, client.post(f"/api/v1/approvals/{request.pk}/approve/", {"arguments_hash": base},
                                     format="json")
        return kind, client.post(f"/api/v1/approvals/{request.pk}/edit/", {
            "arguments": {"order_id": REFUND_ORDER, "reason": "it arrived damaged", "amount": "50"},
            "base_arguments_hash": base}, format="json")

    results = race(2, lambda i: [("approve", _client(approver2)), ("edit", _client(editor))][i], act)

    # then: exactly one of them took effect
    assert not [r for r in results if isinstance(r, BaseException)], results
    outcome = {kind: response for kind, response in results}
    assert sorted(r.status_code for r in outcome.values()) == [200, 409]
    request.refresh_from_db()
    if outcome["approve"].status_code == 200:
        # the approval reached the quorum first: the full refund ran once, the edit was too late
        assert outcome["edit"].json()["code"] == "ALREADY_DECIDED"
        assert request.revision == 0 and request.status == ConfirmationRequest.Status.CONSUMED
        assert Refund.objects.get().amount == Decimal("560.00")
    else:
        # the edit came first: the approval of the old arguments does not count for the new ones
        assert outcome["approve"].json()["code"] == "ARGUMENTS_CHANGED"
        assert request.revision == 1 and request.status == ConfirmationRequest.Status.PENDING
        assert Refund.objects.count() == 0


def test_a_withdrawal_racing_the_last_approval_leaves_one_ending(transactional_db, people, requester):
    request = _pending_refund(requester)
    approver1, approver2 = _approvers(people, 2)
    base = request.arguments_hash
    assert _client(approver1).post(f"/api/v1/approvals/{request.pk}/approve/", {"arguments_hash": base},
                                   format="json").status_code == 200

    def act(state):
        kind, client = state
        if kind == "approve":
            return kind, client.post(f"/api/v1/approvals/{request.pk}/approve/", {"arguments_hash": base},
                                     format="json")
        return kind, client.post(f"/api/v1/my-requests/{request.pk}/withdraw/", {}, format="json")

    results = race(2, lambda i: [("approve", _client(approver2)), ("withdraw", _client(requester))][i], act)

    assert not [r for r in results if isinstance(r, BaseException)], results
    outcome = {kind: response for kind, response in results}
    assert sorted(r.status_code for r in outcome.values()) == [200, 409]
    request.refresh_from_db()
    if outcome["withdraw"].status_code == 200:
        assert request.status == ConfirmationRequest.Status.WITHDRAWN and Refund.objects.count() == 0
    else:
        assert outcome["withdraw"].json()["code"] == "ALREADY_DECIDED"
        assert request.status == ConfirmationRequest.Status.CONSUMED and Refund.objects.count() == 1
