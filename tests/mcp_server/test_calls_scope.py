"""What an MCP call may reach (agentplatform.mcp_server.calls, service level): only the tools
offered to the key's user in its tenant (anything else is TOOL_NOT_FOUND, the same for "exists
elsewhere" and "does not exist"), valid arguments only (nothing stored otherwise), and only the
key's own calls (CallNotFound for anyone else's); a revoked key's calls keep its name."""
from __future__ import annotations

import uuid

import pytest

from agentplatform.api.models import ApiKey
from agentplatform.mcp_server import calls
from agentplatform.mcp_server.calls import CallNotFound
from agentplatform.mcp_server.models import McpCall
from agentplatform.runtime.models import Conversation
from approvals.models import ConfirmationRequest
from audit.models import AuditEvent
from tests.mcp_server.calls_support import (  # noqa: F401 - fixtures
    CANCEL_ARGS,
    HIGH,
    KEY_NAME,
    LOW,
    caller,
    code,
    principal_of,
)
from tools.catalog.models import Cancellation
from tools.errors import ToolPermissionDenied
from tools.services import tenant_tool_set_enabled


def _nothing_stored() -> None:
    assert not McpCall.objects.exists() and not ConfirmationRequest.objects.exists()
    assert Cancellation.objects.count() == 0


def test_a_tool_of_another_tenant_and_an_unknown_tool_answer_the_same(caller, outsider, requester):
    # given: list_orders is off for acme, on for globex
    tenant_tool_set_enabled(tenant_id=requester.tenant_id, tool_name=LOW, enabled=False)
    assert calls.call_tool(principal_of(outsider)[0], name=LOW, arguments={}).state == "completed"

    elsewhere = calls.call_tool(caller, name=LOW, arguments={})
    unknown = calls.call_tool(caller, name="drop_all_orders", arguments={})

    assert elsewhere.state == unknown.state == "failed"
    assert code(elsewhere) == code(unknown) == "TOOL_NOT_FOUND"
    assert elsewhere.result["message"].replace(LOW, "X") == unknown.result["message"].replace("drop_all_orders", "X")
    _nothing_stored()


def test_a_tool_the_user_may_not_use_raises_permission_denied_and_is_audited(people):
    nobody = principal_of(people["acme"]["nobody"], name="nobody-key")[0]

    with pytest.raises(ToolPermissionDenied):
        calls.call_tool(nobody, name=HIGH, arguments=CANCEL_ARGS)

    [row] = AuditEvent.objects.filter(tool_name=HIGH, decision="DENIED")
    assert row.status == "PERMISSION_DENIED" and row.channel["api_key"] == "nobody-key"
    _nothing_stored()


@pytest.mark.parametrize("arguments", [
    {"order_id": "not-an-order", "reason": "x"},  # business rule
    {**CANCEL_ARGS, "tenant_id": 2},  # a field the schema forbids
    {"order_id": "A202607290001"},  # a required field missing
    ["A202607290001"],  # not an object
    "A202607290001",  # not an object
])
def test_invalid_arguments_are_refused_and_nothing_is_stored(caller, arguments):
    answer = calls.call_tool(caller, name=HIGH, arguments=arguments)

    assert answer.state == "failed" and code(answer) == "INVALID_ARGUMENTS" and answer.call_id is None
    _nothing_stored()
    assert AuditEvent.objects.filter(tool_name=HIGH, decision="INVALID").count() == 1


def test_no_arguments_are_an_empty_object(caller):
    assert calls.call_tool(caller, name=LOW, arguments=None).state == "completed"


def test_call_ids_of_other_keys_tenants_or_nobody_are_not_found(caller, requester, outsider):
    answer = calls.call_tool(caller, name=HIGH, arguments=CANCEL_ARGS)
    other_key = principal_of(requester, name="second-key")[0]
    other_tenant = principal_of(outsider)[0]

    for principal, call_id in ((other_key, answer.call_id), (other_tenant, answer.call_id),
                               (caller, uuid.uuid4()), (caller, "not-a-uuid"), (caller, None)):
        with pytest.raises(CallNotFound) as missing:
            calls.call_state(principal, call_id=call_id)
        assert missing.value.code == "TASK_NOT_FOUND"
        with pytest.raises(CallNotFound):
            calls.requester_answer(principal, call_id=call_id, confirm=True)
    assert ConfirmationRequest.objects.get().status == "PENDING" and Cancellation.objects.count() == 0


def test_the_same_call_under_another_key_is_another_call(caller, requester):
    first = calls.call_tool(caller, name=HIGH, arguments=CANCEL_ARGS)
    second = calls.call_tool(principal_of(requester, name="second-key")[0], name=HIGH, arguments=CANCEL_ARGS)
    assert second.call_id != first.call_id and McpCall.objects.count() == 2


def test_each_key_has_its_own_conversation(caller, requester):
    calls.call_tool(caller, name=HIGH, arguments=CANCEL_ARGS)
    conversation = Conversation.objects.get(pk=caller.conversation_id)
    assert conversation.title == f"MCP · {KEY_NAME}" and conversation.user_id == requester.pk
    assert conversation.tenant_id == requester.tenant_id


def test_a_revoked_keys_call_keeps_its_name(caller):
    answer = calls.call_tool(caller, name=HIGH, arguments=CANCEL_ARGS)

    ApiKey.objects.filter(pk=caller.api_key.pk).delete()

    mcp = McpCall.objects.get(pk=answer.call_id)
    assert mcp.api_key_id is None and mcp.key_name == KEY_NAME


def test_a_user_moved_to_another_tenant_calls_nothing(caller, requester, outsider):
    type(requester).objects.filter(pk=requester.pk).update(tenant_id=outsider.tenant_id)

    answer = calls.call_tool(caller, name=HIGH, arguments=CANCEL_ARGS)

    assert answer.state == "failed" and code(answer) == "AUTHENTICATION_FAILED"
    _nothing_stored()


def test_a_key_revoked_or_expired_since_it_was_checked_calls_nothing(caller, requester):
    from core import clock

    ApiKey.objects.filter(pk=caller.api_key.pk).update(expiry=clock.now())
    expired = calls.call_tool(caller, name=HIGH, arguments=CANCEL_ARGS)
    ApiKey.objects.filter(pk=caller.api_key.pk).delete()
    revoked = calls.call_tool(caller, name=HIGH, arguments=CANCEL_ARGS)

    assert code(expired) == code(revoked) == "AUTHENTICATION_FAILED"
    _nothing_stored()
