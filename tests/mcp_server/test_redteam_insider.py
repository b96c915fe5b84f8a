"""Insiders over MCP: a service account's key answering the requester's elicitation form (it never
confirms: APPROVAL_FORBIDDEN, the request stays open), and a key revoked (or its user deactivated)
in the middle of a session: the form answered afterwards decides nothing, the next request is
refused before any MCP message, and the session's list_changed watcher stops polling."""
from __future__ import annotations

import json

import anyio
import mcp_types as types
import pytest

from tests.mcp_server.conftest import INIT, issue_key, mcp_session, raw_post, run

HIGH = "cancel_order"
ORDER = "A202607290001"
ARGS = {"order_id": ORDER, "reason": "customer changed their mind"}


@pytest.fixture
def integration(people):
    """acme's service account, allowed to cancel orders."""
    from django.contrib.auth.models import Permission
    from guardian.shortcuts import assign_perm

    from agentplatform.tenancy.models import User
    from tools.models import Tool

    account = people["acme"]["integration"]
    assign_perm("tools.use_tool", account, Tool.objects.get(name=HIGH))
    account.user_permissions.add(Permission.objects.get(codename=HIGH, content_type__app_label="catalog"))
    return User.objects.get(pk=account.pk)


def _call_with_form(url: str, key: str, on_form) -> tuple[types.CallToolResult, list]:
    shown: list = []

    async def elicit(context, params):
        shown.append(params)
        await anyio.to_thread.run_sync(on_form)
        return types.ElicitResult(action="accept", content={"confirm": True})

    async def go():
        async with mcp_session(url, key, elicitation_callback=elicit) as session:
            return await session.call_tool(HIGH, ARGS)

    return run(go()), shown


def test_a_service_account_answering_the_form_is_approval_forbidden(mcp_live, integration, acme_admin):
    from agentplatform.tenancy.credentials import api_token_issue
    from approvals.models import ConfirmationRequest
    from audit.models import AuditEvent
    from tools.catalog.models import Cancellation, Order

    key = api_token_issue(user=integration, actor=acme_admin, name="sync job")
    result, shown = _call_with_form(mcp_live.url, key, lambda: None)

    assert len(shown) == 1
    assert result.is_error is True and result.structured_content["code"] == "APPROVAL_FORBIDDEN"
    assert key not in result.structured_content["message"]
    request = ConfirmationRequest.objects.get()
    assert request.status == ConfirmationRequest.Status.PENDING
    assert Cancellation.objects.count() == 0 and Order.objects.get(order_id=ORDER).status == "PAID"
    assert key not in json.dumps(list(AuditEvent.objects.values()), default=str)


def test_a_key_revoked_while_its_form_is_open_decides_nothing(mcp_live, requester, settings):
    """The form's answer is a POST with the revoked key: refused (401) before the server reads it;
    the call stays pending once the form's wait ends, nothing runs."""
    from agentplatform.api.models import ApiKey
    from agentplatform.tenancy.credentials import api_key_revoke
    from approvals.models import ConfirmationRequest
    from tools.catalog.models import Cancellation, Order

    settings.MCP_ELICITATION_TIMEOUT_SECONDS = 2
    key = issue_key(requester, name="revoked mid-form")
    public_id = ApiKey.objects.get(name="revoked mid-form").public_id
    try:
        _call_with_form(mcp_live.url, key, lambda: api_key_revoke(public_id=public_id, actor=requester))
    except Exception:  # noqa: BLE001 - the client's own POST of the form's answer was refused (401)
        pass
    assert ConfirmationRequest.objects.get().status == ConfirmationRequest.Status.PENDING
    assert Cancellation.objects.count() == 0 and Order.objects.get(order_id=ORDER).status == "PAID"
    refused = raw_post(mcp_live.url, INIT, key=key)
    assert refused.status_code == 401 and refused.json()["code"] == "AUTHENTICATION_FAILED"


@pytest.mark.django_db
def test_an_answer_from_a_revoked_key_confirms_nothing(requester):
    """The service's own check behind the transport's: a requester's answer given with a key revoked
    since the session opened is refused AUTHENTICATION_FAILED and decides nothing."""
    from agentplatform.mcp_server import calls
    from agentplatform.tenancy.credentials import api_key_revoke
    from approvals.models import ConfirmationRequest
    from tests.mcp_server.calls_support import principal_of

    principal, _ = principal_of(requester)
    pending = calls.call_tool(principal, name=HIGH, arguments=ARGS)
    assert pending.state == "pending"
    api_key_revoke(public_id=principal.api_key.public_id, actor=requester)
    answer = calls.requester_answer(principal, call_id=pending.call_id, confirm=True)
    assert answer.state == "failed" and answer.result["code"] == "AUTHENTICATION_FAILED"
    assert ConfirmationRequest.objects.get().status == ConfirmationRequest.Status.PENDING


@pytest.mark.parametrize("cut_off", ["revoke", "deactivate"])
def test_the_list_changed_watcher_stops_when_the_key_can_no_longer_call(mcp_live, requester, settings, monkeypatch,
                                                                       cut_off):
    from agentplatform.api.models import ApiKey
    from agentplatform.mcp_server import sessions
    from agentplatform.tenancy.credentials import api_key_revoke
    from agentplatform.tenancy.models import User
    from tools.services import tenant_tool_set_enabled

    settings.MCP_LIST_CHANGED_POLL_SECONDS = 0.1
    key = issue_key(requester, name="watched")
    public_id = ApiKey.objects.get(name="watched").public_id
    polls: list[object] = []
    real = sessions.current_fingerprint

    def counted(*args, **kwargs):
        polls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(sessions, "current_fingerprint", counted)

    def cut() -> None:
        if cut_off == "revoke":
            api_key_revoke(public_id=public_id, actor=requester)
        else:
            User.objects.filter(pk=requester.pk).update(is_active=False)

    async def go():
        notified = []

        async def on_message(message):
            if getattr(message, "method", "") == "notifications/tools/list_changed":
                notified.append(message)

        async with mcp_session(mcp_live.url, key, message_handler=on_message) as session:
            await session.list_tools()
            with anyio.fail_after(10):
                while len(polls) < 2:  # the watcher runs
                    await anyio.sleep(0.05)
            await anyio.to_thread.run_sync(cut)
            # A poll or two sees the key gone and ends the watcher: wait until no poll came for a
            # whole second (ten poll intervals), however loaded the machine; a watcher that never
            # ends keeps polling and fails here.
            with anyio.fail_after(15):
                seen, quiet = len(polls), 0.0
                while quiet < 1.0:
                    await anyio.sleep(0.25)
                    quiet = quiet + 0.25 if len(polls) == seen else 0.0
                    seen = len(polls)
            await anyio.to_thread.run_sync(
                lambda: tenant_tool_set_enabled(tenant_id=requester.tenant_id, tool_name=HIGH, enabled=False))
            await anyio.sleep(1.0)
            return seen, len(polls), notified

    seen, later, notified = run(go())
    # A live watcher polls every 0.1 s: about 10 polls in that last second. One poll that was
    # already waiting for a thread when the quiet second ended (a loaded machine) may still land.
    assert later - seen <= 1, "the watcher still polls for a key that can no longer call"
    assert notified == []
