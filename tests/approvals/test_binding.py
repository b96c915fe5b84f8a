"""A confirmation is bound to tenant, user, conversation, tool, arguments hash and expiry, and is
consumed with one compare-and-set on exactly that binding. Consuming it through the pipeline with any other binding is refused
(CONFIRMATION_INVALID / CONFIRMATION_EXPIRED), executes nothing, and does not burn the confirmation;
the same arguments in another key order or spacing hash the same and are accepted."""
from __future__ import annotations

import datetime
import json
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from guardian.shortcuts import assign_perm

from core import clock
from agentplatform.runtime.services import conversation_create
from agentplatform.tenancy.models import User
from approvals import consumption, expiry, requester_actions
from approvals.models import ConfirmationRequest
from tests.tools.support import CANCEL_ARGS, ORDER, assistant, audit_rows, tool_context
from tools.catalog.models import Cancellation, Order
from tools.calls import CallOutcome
from tools.manager import ToolCallingManager
from tools.models import IdempotencyRecord, Tool

Status = ConfirmationRequest.Status
CALL = "call_cancel"


@dataclass
class Confirmed:
    """A requester's cancel_order call, gated and confirmed with its token, not yet consumed."""

    conversation_id: uuid.UUID
    request_id: uuid.UUID
    token: str


def _gate(user, args: dict[str, Any] | str = CANCEL_ARGS) -> Confirmed:
    conversation = conversation_create(user=user)
    result = ToolCallingManager().execute_tool_calls(tool_context(user, conversation.pk),
                                                     assistant((CALL, "cancel_order", args)))
    [pending] = result.pending
    return Confirmed(conversation.pk, uuid.UUID(pending.confirmation_id), pending.token)


@pytest.fixture
def confirmed(requester) -> Confirmed:
    gated = _gate(requester)
    requester_actions.confirmation_confirm(token=gated.token, user=requester)
    return gated


def _consume(user, conversation_id, request_id, *, name: str = "cancel_order",
             args: dict[str, Any] | str = CANCEL_ARGS) -> CallOutcome:
    ctx = tool_context(user, conversation_id, confirmations={CALL: request_id})
    [outcome] = ToolCallingManager().execute_tool_calls(ctx, assistant((CALL, name, args)), only={CALL}).outcomes
    return outcome


def _assert_refused(outcome: CallOutcome, code: str, request_id: uuid.UUID, status: str = Status.CONFIRMED) -> None:
    assert (outcome.result.success, outcome.result.code) == (False, code)
    assert outcome.pending is None
    # nothing executed
    assert not Cancellation.objects.exists() and not IdempotencyRecord.objects.exists()
    assert set(Order.objects.filter(order_id__in=[ORDER, "A202607290003"]).values_list("status", flat=True)) == {"PAID"}
    assert not audit_rows(decision="EXECUTED")
    # the refusal is audited with the confirmation id, and did not burn the confirmation
    refusal = audit_rows(tool_call_id=CALL, confirmation_id=request_id, status=code)
    assert refusal and refusal[-1].decision in ("DENIED", "EXPIRED")
    assert ConfirmationRequest.objects.get(pk=request_id).status == status


def _colleague(requester) -> User:
    """A second requester of the same tenant, with the same permissions and tool grants."""
    user = User.objects.create(username="acme-requester2", tenant=requester.tenant)
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="catalog",
                                                         codename__in=["cancel_order", "refund_order"]))
    for row in Tool.objects.all():
        assign_perm("tools.use_tool", user, row)
    return User.objects.get(pk=user.pk)


def test_the_bound_call_is_accepted_once(requester, confirmed):
    outcome = _consume(requester, confirmed.conversation_id, confirmed.request_id)

    assert outcome.result.success and outcome.result.data["current_status"] == "CANCELLED"
    assert Cancellation.objects.count() == 1
    request = ConfirmationRequest.objects.get(pk=confirmed.request_id)
    assert request.status == Status.CONSUMED and request.consumed_at is not None
    [row] = audit_rows(decision="EXECUTED")
    assert row.confirmation_id == confirmed.request_id


def test_another_user_of_the_same_tenant_is_refused(requester, confirmed):
    outcome = _consume(_colleague(requester), confirmed.conversation_id, confirmed.request_id)
    _assert_refused(outcome, "CONFIRMATION_INVALID", confirmed.request_id)


def test_a_user_of_another_tenant_is_refused(outsider, confirmed):
    outcome = _consume(outsider, confirmed.conversation_id, confirmed.request_id)
    _assert_refused(outcome, "CONFIRMATION_INVALID", confirmed.request_id)


def test_another_conversation_is_refused(requester, confirmed):
    outcome = _consume(requester, conversation_create(user=requester).pk, confirmed.request_id)
    _assert_refused(outcome, "CONFIRMATION_INVALID", confirmed.request_id)


def test_another_tool_is_refused(requester, confirmed):
    outcome = _consume(requester, confirmed.conversation_id, confirmed.request_id, name="refund_order")
    _assert_refused(outcome, "CONFIRMATION_INVALID", confirmed.request_id)
    assert not ConfirmationRequest.objects.filter(tool_name="refund_order").exists()


# A consumer refused *before* the compare-and-set (the tool not offered to it, a grant it lacks)
# must not burn the request either: only the request's own call ends it (tools.consume.Consumption.refuse).

def test_a_colleague_without_the_tools_permission_does_not_burn_the_confirmation(requester, confirmed):
    colleague = User.objects.create(username="acme-requester2", tenant=requester.tenant)
    for row in Tool.objects.all():
        assign_perm("tools.use_tool", colleague, row)  # the tool's own permission (catalog.cancel_order) is missing

    outcome = _consume(User.objects.get(pk=colleague.pk), confirmed.conversation_id, confirmed.request_id)

    assert (outcome.result.success, outcome.result.code) == (False, "PERMISSION_DENIED")
    assert not Cancellation.objects.exists()
    assert ConfirmationRequest.objects.get(pk=confirmed.request_id).status == Status.CONFIRMED
    # and the request's own call still runs it
    assert _consume(requester, confirmed.conversation_id, confirmed.request_id).result.success


def test_a_tool_name_that_is_not_offered_does_not_burn_the_confirmation(requester, confirmed):
    outcome = _consume(requester, confirmed.conversation_id, confirmed.request_id, name="no_such_tool")

    assert outcome.result.success is False and not Cancellation.objects.exists()
    assert ConfirmationRequest.objects.get(pk=confirmed.request_id).status == Status.CONFIRMED


def test_a_user_of_another_tenant_without_the_tool_neither_burns_it_nor_learns_its_result(requester, outsider,
                                                                                         confirmed):
    outsider.user_permissions.remove(*Permission.objects.filter(codename="cancel_order"))
    outsider = User.objects.get(pk=outsider.pk)

    theirs = _consume(outsider, confirmed.conversation_id, confirmed.request_id)
    assert ConfirmationRequest.objects.get(pk=confirmed.request_id).status == Status.CONFIRMED

    mine = _consume(requester, confirmed.conversation_id, confirmed.request_id)
    assert mine.result.success
    again = _consume(outsider, confirmed.conversation_id, confirmed.request_id)
    # a refusal, never the requester's stored result (another tenant's data)
    for outcome in (theirs, again):
        assert outcome.result.success is False and outcome.result.code == "PERMISSION_DENIED", outcome.result
        assert mine.result.data["cancellation_id"] not in json.dumps(outcome.result.data)


@pytest.mark.parametrize("changed", [{"reason": "customer changed their mind "}, {"reason": "fraud"},
                                     {"order_id": "A202607290003"}], ids=["trailing-space", "reason", "order"])
def test_another_argument_value_is_refused(requester, confirmed, changed):
    outcome = _consume(requester, confirmed.conversation_id, confirmed.request_id, args={**CANCEL_ARGS, **changed})
    _assert_refused(outcome, "CONFIRMATION_INVALID", confirmed.request_id)


def test_undecided_request_after_expiry_is_refused_as_expired(requester, monkeypatch):
    gated = _gate(requester)  # never confirmed
    request = ConfirmationRequest.objects.get(pk=gated.request_id)
    later = request.expires_at + datetime.timedelta(seconds=1)
    monkeypatch.setattr(clock, "now", lambda: later)

    outcome = _consume(requester, gated.conversation_id, gated.request_id)

    _assert_refused(outcome, "CONFIRMATION_EXPIRED", gated.request_id, status=Status.PENDING)


def test_a_confirmed_request_is_a_decision_that_does_not_expire(requester, confirmed, monkeypatch):
    # docs/decisions.md: only undecided requests expire; a confirmed call runs when its turn settles.
    request = ConfirmationRequest.objects.get(pk=confirmed.request_id)
    later = request.expires_at + datetime.timedelta(seconds=1)
    monkeypatch.setattr(clock, "now", lambda: later)
    assert expiry.confirmations_expire() == []

    outcome = _consume(requester, confirmed.conversation_id, confirmed.request_id)

    assert outcome.result.success, outcome.result
    assert Order.objects.get(order_id=ORDER).status == "CANCELLED"
    request.refresh_from_db()
    assert (request.status, request.outcome_code) == (Status.CONSUMED, "OK")


def test_reordered_keys_and_whitespace_hash_the_same_and_are_accepted(requester, confirmed):
    raw = '\n{  "reason" :\t"customer changed their mind" ,\n   "order_id":"%s"  }  ' % ORDER
    assert json.loads(raw) == CANCEL_ARGS and raw != json.dumps(CANCEL_ARGS)

    outcome = _consume(requester, confirmed.conversation_id, confirmed.request_id, args=raw)

    assert outcome.result.success, outcome.result
    assert Cancellation.objects.count() == 1
    assert ConfirmationRequest.objects.get(pk=confirmed.request_id).status == Status.CONSUMED


def test_a_pending_request_cannot_be_consumed_before_the_human_decides(requester):
    gated = _gate(requester)  # not confirmed
    outcome = _consume(requester, gated.conversation_id, gated.request_id)
    _assert_refused(outcome, "CONFIRMATION_INVALID", gated.request_id, status=Status.PENDING)


def test_a_declined_request_cannot_be_consumed(requester):
    gated = _gate(requester)
    requester_actions.confirmation_cancel(token=gated.token, user=requester)
    outcome = _consume(requester, gated.conversation_id, gated.request_id)
    _assert_refused(outcome, "CONFIRMATION_INVALID", gated.request_id, status=Status.CANCELLED)


def test_an_unknown_confirmation_id_is_refused(requester, confirmed):
    unknown = uuid.uuid4()
    outcome = _consume(requester, confirmed.conversation_id, unknown)
    assert (outcome.result.success, outcome.result.code) == (False, "CONFIRMATION_INVALID")
    assert not Cancellation.objects.exists()


def test_a_consumed_confirmation_is_not_consumed_again(requester, confirmed):
    first = _consume(requester, confirmed.conversation_id, confirmed.request_id)
    again = _consume(requester, confirmed.conversation_id, confirmed.request_id)

    # the replay gets the stored business result, not a second cancellation
    assert again.result == first.result
    assert Cancellation.objects.count() == 1
    assert [r.decision for r in audit_rows(tool_call_id=CALL) if r.decision in ("EXECUTED", "IDEMPOTENT_HIT")] == [
        "EXECUTED", "IDEMPOTENT_HIT"]


def test_the_compare_and_set_itself_refuses_a_second_consume(requester, confirmed):
    from approvals.errors import ConfirmationNotConsumable
    from tools.hashing import arguments_hash

    binding = dict(request_id=confirmed.request_id, tenant_id=requester.tenant_id, user_id=requester.pk,
                   conversation_id=confirmed.conversation_id, tool_name="cancel_order",
                   arguments_hash=arguments_hash(CANCEL_ARGS), policy="REQUESTER", quorum=1, risk="HIGH",
                   ttl_seconds=900)
    consumption.confirmation_consume(**binding)
    assert ConfirmationRequest.objects.get(pk=confirmed.request_id).status == Status.CONSUMED
    with pytest.raises(ConfirmationNotConsumable):
        consumption.confirmation_consume(**binding)
