"""Retention settings: the defaults, a tenant's overrides, and who may choose what. The audit trail
never goes below the floor (RETENTION_AUDIT_MIN_DAYS), whoever asks; a tenant administrator may
only shorten; every change is a CONTROL_CHANGE row with old and new values; the admin refuses what
the role may not choose and scopes the rows to the administrator's tenant."""
from __future__ import annotations

import pytest

from agentplatform.retention import policy
from agentplatform.retention.models import TenantRetention
from agentplatform.retention.services import tenant_retention_set
from agentplatform.tenancy.actor import acting_as
from audit.models import AuditEvent


@pytest.fixture
def days(settings):
    settings.RETENTION_RUN_EVENT_DAYS = 30
    settings.RETENTION_CONVERSATION_DAYS = 180
    settings.RETENTION_REQUEST_DAYS = 365
    settings.RETENTION_AUDIT_DAYS = 400
    settings.RETENTION_AUDIT_MIN_DAYS = 365


def test_a_tenant_administrator_cannot_shorten_the_audit_trail_below_the_floor(acme_admin, days):
    with pytest.raises(policy.RetentionSettingRefused) as refused:
        tenant_retention_set(actor=acme_admin, tenant_id=acme_admin.tenant_id, values={"audit_days": 30})

    assert refused.value.code == "RETENTION_SETTING_REFUSED" and "audit_days" in refused.value.message
    assert not TenantRetention.objects.exists()


def test_nor_can_a_platform_operator(operator, acme_admin, days):
    with pytest.raises(policy.RetentionSettingRefused):
        tenant_retention_set(actor=operator, tenant_id=acme_admin.tenant_id, values={"audit_days": 364})


def test_a_tenant_administrator_may_shorten_but_not_lengthen_nor_keep_forever(acme_admin, days):
    assert policy.setting_errors({"run_event_days": 60}, platform_operator=False).keys() == {"run_event_days"}
    assert policy.setting_errors({"request_days": 0}, platform_operator=False).keys() == {"request_days"}
    assert policy.setting_errors({"request_days": 0, "audit_days": 3650}, platform_operator=True) == {}

    row = tenant_retention_set(actor=acme_admin, tenant_id=acme_admin.tenant_id,
                               values={"run_event_days": 7, "audit_days": 365})

    assert policy.days_for(row) == policy.RetentionDays(7, 180, 365, 365)


def test_a_stored_audit_value_below_a_raised_floor_counts_as_the_floor(acme_admin, days, settings):
    row = tenant_retention_set(actor=acme_admin, tenant_id=acme_admin.tenant_id, values={"audit_days": 365})
    settings.RETENTION_AUDIT_MIN_DAYS = 500

    assert policy.days_for(row).audit_days == 500
    assert policy.days_for(None).audit_days == 500


def test_a_change_is_a_control_change_with_old_and_new_values(acme_admin, days):
    with acting_as(acme_admin):
        tenant_retention_set(actor=acme_admin, tenant_id=acme_admin.tenant_id, values={"audit_days": 380})
        tenant_retention_set(actor=acme_admin, tenant_id=acme_admin.tenant_id, values={"audit_days": 370})

    rows = list(AuditEvent.objects.filter(tenant_id=acme_admin.tenant_id, decision="CONTROL_CHANGE",
                                          masked_arguments__object__type="retention").order_by("chain_seq"))
    assert [(r.status, r.actor_id) for r in rows] == [("CREATED", acme_admin.pk), ("CHANGED", acme_admin.pk)]
    assert (rows[1].masked_arguments["old"], rows[1].masked_arguments["new"]) == ({"audit_days": 380},
                                                                                  {"audit_days": 370})


def test_the_admin_refuses_a_value_below_the_floor_and_scopes_to_the_tenant(client, acme_admin, globex_admin, days):
    client.force_login(acme_admin)

    refused = client.post("/admin/retention/tenantretention/add/",
                          {"tenant": globex_admin.tenant_id, "audit_days": "10"})
    saved = client.post("/admin/retention/tenantretention/add/",
                        {"tenant": acme_admin.tenant_id, "audit_days": "365", "run_event_days": "7"})

    assert refused.status_code == 200 and not TenantRetention.objects.filter(audit_days=10).exists()
    assert saved.status_code == 302
    row = TenantRetention.objects.get()
    assert (row.tenant_id, row.audit_days, row.run_event_days) == (acme_admin.tenant_id, 365, 7)
    client.force_login(globex_admin)
    assert client.get(f"/admin/retention/tenantretention/{row.pk}/change/").status_code == 404
