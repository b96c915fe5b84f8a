"""One tenant administrator cannot make or impersonate approvers alone, through the admin pages
and the API: new accounts' approver grants and a second administrator become proposals that a
second person decides, API keys are issued only to their owner, and an approver's password cannot
be set by the administrator."""
from __future__ import annotations

from django.urls import reverse
from rest_framework.test import APIClient

from agentplatform.controlplane.models import PendingControlChange
from agentplatform.tenancy.models import User
from tests.controlplane.conftest import admin_url
from tools.models import Tool


def test_one_administrator_cannot_make_or_impersonate_approvers(client, acme_admin, approver1):
    client.force_login(acme_admin)
    refund = Tool.objects.get(name="refund_order")
    socks = []
    for name in ("acme-sock1", "acme-sock2"):
        response = client.post(reverse("admin:tenancy_user_add"), {
            "username": name, "password1": "sock-pass-123!", "password2": "sock-pass-123!",
            "usable_password": "true"})
        assert response.status_code == 302
        socks.append(User.objects.get(username=name))

    # approve_tool on refund_order: a proposal each, no standing
    for sock in socks:
        response = client.post(reverse("admin:tools_tool_permissions_manage_user", args=[refund.pk, sock.pk]),
                               {"permissions": ["approve_tool"]})
        assert response.url == admin_url(PendingControlChange, "changelist")
        assert not User.objects.get(pk=sock.pk).has_perm("tools.approve_tool", refund)

    # keys: never for another person, a sock puppet or a real approver
    api = APIClient()
    api.force_authenticate(acme_admin)
    for name in ("acme-sock1", approver1.username):
        response = api.post("/api/v1/api-keys/", {"name": "k", "user": name}, format="json")
        assert (response.status_code, response.json()["code"]) == (403, "KEY_FOR_ANOTHER_PERSON")

    # a second administrator of its own: a proposal too, so no one approves the grants
    page = client.get(admin_url(User, "change", socks[0].pk))
    form = page.context["adminform"].form
    data = {k: v for k, v in form.initial.items() if k in ("username", "first_name", "last_name", "email")}
    data.update({"is_active": "on", "is_staff": "on"})
    assert client.post(admin_url(User, "change", socks[0].pk), data).status_code == 302
    assert not User.objects.get(pk=socks[0].pk).is_staff
    assert set(PendingControlChange.objects.filter(status="PENDING").values_list("kind", flat=True)) == {
        "USER_GRANT", "ADMIN"}

    # and acting as the real approver: its password cannot be set by the administrator
    stored = User.objects.get(pk=approver1.pk).password
    client.post(reverse("admin:auth_user_password_change", args=[approver1.pk]),
                {"password1": "sock-pass-123!", "password2": "sock-pass-123!", "usable_password": "true"})
    assert User.objects.get(pk=approver1.pk).password == stored
