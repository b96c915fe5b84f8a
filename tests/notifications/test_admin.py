"""The webhook admin: platform operators manage endpoints and alone read the secret; tenant
administrators see their own tenant's endpoints (no secret) and delivery log, read-only."""
from __future__ import annotations

import pytest
from django.urls import reverse

from audit.models import AuditEvent
from notifications.models import WebhookDelivery, WebhookEndpoint

pytestmark = pytest.mark.django_db


@pytest.fixture
def hooks(settings, people):
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = False
    acme = WebhookEndpoint.objects.create(tenant=people["acme"]["admin"].tenant, name="acme relay",
                                          url="https://hooks.example.com/acme")
    globex = WebhookEndpoint.objects.create(tenant=people["globex"]["admin"].tenant, name="globex relay",
                                            url="https://hooks.example.com/globex")
    for endpoint in (acme, globex):
        WebhookDelivery.objects.create(tenant_id=endpoint.tenant_id, endpoint=endpoint, event="approval.requested",
                                       attempt=1, outcome=WebhookDelivery.Outcome.RETRYING, response_status=503,
                                       retry_in_seconds=5, body={"event": "approval.requested"})
    return acme, globex


def _change(endpoint) -> str:
    return reverse("admin:notifications_webhookendpoint_change", args=[endpoint.pk])


def test_only_a_platform_operator_reads_the_secret(client, operator, acme_admin, hooks):
    acme, _ = hooks
    client.force_login(operator)
    page = client.get(_change(acme))
    assert page.status_code == 200 and acme.secret in page.content.decode()

    client.force_login(acme_admin)
    page = client.get(_change(acme))
    assert page.status_code == 200
    html = page.content.decode()
    assert "acme relay" in html and acme.secret not in html and "whsec_" not in html
    listing = client.get(reverse("admin:notifications_webhookendpoint_changelist")).content.decode()
    assert "acme relay" in listing and "globex relay" not in listing and "whsec_" not in listing


def test_a_tenant_administrator_cannot_change_or_add_endpoints_nor_see_another_tenants(client, acme_admin, hooks):
    acme, globex = hooks
    client.force_login(acme_admin)
    assert client.get(_change(globex)).status_code == 404
    assert client.get(reverse("admin:notifications_webhookendpoint_add")).status_code == 403
    response = client.post(_change(acme), {"tenant": acme.tenant_id, "name": "mine", "url": "https://evil.example/",
                                           "is_active": "on"})
    assert response.status_code == 403
    assert WebhookEndpoint.objects.get(pk=acme.pk).url == "https://hooks.example.com/acme"


def test_the_operator_adds_an_endpoint_and_a_private_url_is_refused(client, operator, people):
    client.force_login(operator)
    add = reverse("admin:notifications_webhookendpoint_add")
    tenant = people["acme"]["admin"].tenant
    refused = client.post(add, {"tenant": tenant.pk, "name": "x", "url": "http://169.254.169.254/latest",
                                "is_active": "on"})
    assert refused.status_code == 200 and "private, loopback or reserved" in refused.content.decode()
    assert not WebhookEndpoint.objects.exists()
    created = client.post(add, {"tenant": tenant.pk, "name": "relay", "url": "https://93.184.215.14/hook",
                                "is_active": "on"})
    assert created.status_code == 302
    endpoint = WebhookEndpoint.objects.get()
    assert endpoint.secret.startswith("whsec_") and len(endpoint.secret) > 40


def test_the_operator_rotates_a_secret(client, operator, hooks):
    acme, globex = hooks
    client.force_login(operator)
    response = client.post(reverse("admin:notifications_webhookendpoint_changelist"),
                           {"action": "rotate_secret", "_selected_action": [acme.pk]})
    assert response.status_code == 302
    rotated = WebhookEndpoint.objects.get(pk=acme.pk).secret
    assert rotated != acme.secret
    assert WebhookEndpoint.objects.get(pk=globex.pk).secret == globex.secret
    # a control-plane change in acme's trail, the secret as "<changed>", never its value
    row = AuditEvent.objects.get(decision="CONTROL_CHANGE", tenant_id=acme.tenant_id, status="CHANGED",
                                 message__startswith="webhook_endpoint")
    assert row.masked_arguments["new"] == {"secret": "<changed>"}
    assert rotated not in str(row.masked_arguments) and acme.secret not in str(row.masked_arguments)
    created = AuditEvent.objects.filter(decision="CONTROL_CHANGE", status="CREATED",
                                        message__startswith="webhook_endpoint").first()
    assert created.masked_arguments["new"]["host"] == "hooks.example.com" and "secret" not in created.masked_arguments["new"]


def test_the_delivery_log_is_visible_per_tenant_and_read_only(client, operator, acme_admin, hooks):
    acme, globex = hooks
    url = reverse("admin:notifications_webhookdelivery_changelist")
    client.force_login(operator)
    html = client.get(url).content.decode()
    assert html.count("Retrying") >= 3 and "503" in html  # two rows and the filter

    client.force_login(acme_admin)
    html = client.get(url).content.decode()
    assert "acme relay" in html and "globex relay" not in html
    row = WebhookDelivery.objects.get(endpoint=globex)
    assert client.get(reverse("admin:notifications_webhookdelivery_change", args=[row.pk])).status_code == 404
    mine = WebhookDelivery.objects.get(endpoint=acme)
    assert client.get(reverse("admin:notifications_webhookdelivery_change", args=[mine.pk])).status_code == 200
    assert client.post(reverse("admin:notifications_webhookdelivery_delete", args=[mine.pk])).status_code == 403
