"""The kill switch in the admin: the tools list's stop action asks for the reason and stops the tool
through the audited service; the list of stops shows a tenant administrator their tenant's and the
platform's stops, and its release action lifts only what they may lift."""
from __future__ import annotations

import pytest
from django.urls import reverse

from policies.kill_switch import active_stop, kill_switch_engage
from policies.models import KillSwitch
from tools.models import Tool

pytestmark = pytest.mark.django_db

TOOLS = reverse("admin:tools_tool_changelist")
STOPS = reverse("admin:policies_killswitch_changelist")


def _stop_action(client, tool: Tool, **extra):
    return client.post(TOOLS, {"action": "stop_selected_tools", "_selected_action": [tool.pk], **extra})


def test_a_tenant_administrator_stops_a_tool_from_the_tools_list_with_a_reason(client, acme_admin, outsider):
    client.force_login(acme_admin)
    tool = Tool.objects.get(name="refund_order")
    page = _stop_action(client, tool)
    assert page.status_code == 200 and b'name="reason"' in page.content  # asks first, stops nothing
    assert b"only acme" in page.content and b"every tenant" not in page.content
    assert not KillSwitch.objects.exists()
    assert _stop_action(client, tool, confirm="yes", reason="").status_code == 200  # a reason is required
    assert not KillSwitch.objects.exists()
    response = _stop_action(client, tool, confirm="yes", reason="duplicate refunds", scope=str(acme_admin.tenant_id))
    assert response.status_code == 302
    stop = KillSwitch.objects.get()
    assert (stop.tenant_id, stop.reason, stop.engaged_by_id) == (acme_admin.tenant_id, "duplicate refunds",
                                                                 acme_admin.pk)
    assert active_stop(outsider.tenant_id, "refund_order") is None
    # Posting another tenant's id does not reach it.
    _stop_action(client, Tool.objects.get(name="list_orders"), confirm="yes", reason="x",
                 scope=str(outsider.tenant_id))
    assert active_stop(outsider.tenant_id, "list_orders") is None


def test_an_operator_stops_a_tool_everywhere_from_the_tools_list(client, operator, requester, outsider):
    client.force_login(operator)
    tool = Tool.objects.get(name="list_orders")
    assert b"every tenant" in _stop_action(client, tool).content
    _stop_action(client, tool, confirm="yes", reason="replica broken", scope="all")
    assert active_stop(requester.tenant_id, "list_orders") and active_stop(outsider.tenant_id, "list_orders")


def test_the_stops_list_is_scoped_and_release_lifts_only_what_the_viewer_may(client, acme_admin, globex_admin,
                                                                              operator):
    mine = kill_switch_engage(tool_name="refund_order", actor=acme_admin, reason="acme stop").stop
    everywhere = kill_switch_engage(tool_name="list_orders", actor=operator, reason="platform stop").stop
    globex = kill_switch_engage(tool_name="cancel_order", actor=globex_admin, reason="globex stop").stop
    client.force_login(acme_admin)
    listing = client.get(STOPS)
    assert listing.status_code == 200
    assert b"acme stop" in listing.content and b"platform stop" in listing.content
    assert b"globex stop" not in listing.content
    assert client.get(reverse("admin:policies_killswitch_change", args=[globex.pk])).status_code == 404
    assert client.get(reverse("admin:policies_killswitch_add")).status_code == 403
    client.post(STOPS, {"action": "release_selected", "_selected_action": [mine.pk, everywhere.pk],
                        "confirm": "yes", "reason": "incident closed"})
    mine.refresh_from_db(), everywhere.refresh_from_db()
    assert (mine.released_by_id, mine.release_reason) == (acme_admin.pk, "incident closed")
    assert everywhere.released_at is None  # the platform's stop is the operator's to lift
    client.force_login(operator)
    client.post(STOPS, {"action": "release_selected", "_selected_action": [everywhere.pk, globex.pk],
                        "confirm": "yes", "reason": "all clear"})
    assert not KillSwitch.objects.filter(released_at__isnull=True).exists()


def test_ids_that_only_python_calls_digits_are_not_ids(client, operator):
    """"²" passes str.isdigit() but is no row id: the operator's pages answer, never a server error."""
    client.force_login(operator)
    tool = Tool.objects.get(name="list_orders")
    response = _stop_action(client, tool, confirm="yes", reason="typo in scope", scope="²")
    assert response.status_code in (200, 302)
    assert active_stop(tool_name="list_orders", tenant_id=None) is not None  # read as "every tenant"
    assert client.get(reverse("admin:policies_shadow_calls"), {"tenant": "²"}).status_code == 200
    assert client.get(f"/admin/tenancy/user/{'²'}/roles/").status_code == 404
