"""MCP clients retrying at the same moment, with real threads on PostgreSQL, each on its own
database connection (agentplatform.mcp_server.calls): the approved call executes exactly once,
and a first call sent twice at once asks the approvers once."""
from __future__ import annotations

import json
import uuid

import pytest

from agentplatform.mcp_server import calls
from agentplatform.mcp_server.models import McpCall
from approvals import approver_actions
from approvals.models import ConfirmationRequest
from audit.models import AuditEvent
from tests.mcp_server.calls_support import CRITICAL, REFUND_ARGS, principal_of
from tests.tools.support import race
from tools.catalog.models import Refund

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

N = 8


def test_clients_retrying_an_approved_call_at_once_execute_it_once(people, requester, approver1, approver2):
    # given: a CRITICAL call the two approvers approved, not run yet
    principal = principal_of(requester)[0]
    first = calls.call_tool(principal, name=CRITICAL, arguments=REFUND_ARGS)
    request_id = uuid.UUID(first.pending["request_id"])
    for approver in (approver1, approver2):
        approver_actions.confirmation_approve(request_id=request_id, approver=approver)
    assert Refund.objects.count() == 0

    # when: N clients retry at once, half by the same call, half by its task id
    def act(index: int):
        if index % 2:
            return calls.call_state(principal, call_id=first.call_id)
        return calls.call_tool(principal, name=CRITICAL, arguments=REFUND_ARGS)

    answers = race(N, lambda index: index, act)

    # then: one execution; every client gets the result, all but one as a replay
    errors = [a for a in answers if isinstance(a, BaseException)]
    assert not errors, errors
    assert Refund.objects.count() == 1
    assert all(a.state == "completed" and a.call_id == first.call_id for a in answers)
    assert sum(not a.replayed for a in answers) == 1
    assert len({json.dumps(a.result["data"], sort_keys=True) for a in answers}) == 1
    mcp = McpCall.objects.get()
    assert mcp.status == McpCall.Status.COMPLETED
    assert AuditEvent.objects.filter(tool_call_id=mcp.tool_call_id, decision="EXECUTED").count() == 1
    assert ConfirmationRequest.objects.get(pk=request_id).status == ConfirmationRequest.Status.CONSUMED


def test_the_same_first_call_sent_at_once_asks_once(people, requester):
    principal = principal_of(requester)[0]

    answers = race(N, lambda index: index,
                   lambda _: calls.call_tool(principal, name=CRITICAL, arguments=REFUND_ARGS))

    errors = [a for a in answers if isinstance(a, BaseException)]
    assert not errors, errors
    assert all(a.state == "pending" for a in answers)
    assert len({a.call_id for a in answers}) == 1 and len({a.pending["request_id"] for a in answers}) == 1
    assert ConfirmationRequest.objects.count() == 1 and McpCall.objects.count() == 1
