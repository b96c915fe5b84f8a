"""The bundle pages of the admin: a tenant administrator reads their tenant's versions (source,
rules, limits), uploads or pastes a bundle, validates it, sees the diff, applies it or sees that it
was sent for a second person's approval; another tenant's versions answer 404."""
from __future__ import annotations

import textwrap

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from agentplatform.controlplane.bundles import policy_bundle_apply
from agentplatform.controlplane.models import PendingControlChange
from policies.models import PolicyBundle
from tests.policies.support import EXAMPLE

pytestmark = pytest.mark.django_db

LIST = "/admin/policies/policybundle/"
ADD = "/admin/policies/policybundle/add/"
LIMITED = EXAMPLE + textwrap.dedent('''\
    limits:
      - id: refunds-per-order-day
        tool: refund_order
        per: order_id
        window_seconds: 86400
        max_count: 3
        max_sum: {argument: amount, value: "300.00"}
        when_exceeded: approval
        quorum: 2
    ''')


def _detail(bundle: PolicyBundle) -> str:
    return reverse("admin:policies_policybundle_change", args=[bundle.pk])


def test_a_tenant_admin_reads_only_their_tenants_versions(client, acme_admin, globex_admin):
    acme = policy_bundle_apply(tenant=acme_admin.tenant, text=LIMITED, actor=acme_admin)
    policy_bundle_apply(tenant=globex_admin.tenant, text=EXAMPLE, actor=globex_admin)
    acme_row = PolicyBundle.objects.get(tenant=acme_admin.tenant, version=acme.version)
    globex_row = PolicyBundle.objects.get(tenant=globex_admin.tenant)
    client.force_login(acme_admin)
    listing = client.get(LIST)
    assert listing.status_code == 200
    assert _detail(acme_row) in listing.content.decode() and _detail(globex_row) not in listing.content.decode()
    page = client.get(_detail(acme_row)).content.decode()
    assert 'data-testid="bundle-rules"' in page and "refunds-over-500-need-three" in page
    assert "Refunds over 5,000 are handled by finance" in page
    assert 'data-testid="bundle-limits"' in page and "amount ≤ 300.00" in page and "approval (2)" in page
    assert 'data-testid="bundle-source"' in page
    assert client.get(_detail(globex_row)).status_code == 404
    assert client.get(reverse("admin:policies_policybundle_delete", args=[globex_row.pk])).status_code == 404


def test_a_member_sees_nothing(client, requester):
    client.force_login(requester)
    assert client.get(ADD).status_code in (302, 404)
    assert not PolicyBundle.objects.exists()


def test_validate_shows_the_diff_and_stores_nothing_then_apply_stores_it(client, acme_admin):
    policy_bundle_apply(tenant=acme_admin.tenant, text=EXAMPLE, actor=acme_admin)
    client.force_login(acme_admin)
    checked = client.post(ADD, {"source": LIMITED, "check": "1"})
    page = checked.content.decode()
    assert checked.status_code == 200 and 'data-status="checked"' in page
    assert 'data-testid="bundle-diff"' in page and "+  - id: refunds-per-order-day" in page
    assert "would become acme v2" in page
    assert PolicyBundle.objects.filter(tenant=acme_admin.tenant).count() == 1
    applied = client.post(ADD, {"source": LIMITED, "apply": "1", "comment": "daily cap"})
    row = PolicyBundle.objects.get(tenant=acme_admin.tenant, version=2)
    assert applied.status_code == 302 and applied["Location"] == _detail(row)
    assert row.comment == "daily cap" and row.created_by == acme_admin


def test_an_uploaded_file_is_validated_and_kept_for_apply(client, acme_admin):
    client.force_login(acme_admin)
    upload = SimpleUploadedFile("bundle.yaml", EXAMPLE.encode(), content_type="application/x-yaml")
    page = client.post(ADD, {"upload": upload, "check": "1"}).content.decode()
    assert 'data-status="checked"' in page and "refunds-over-500-need-three" in page
    assert "@id(&quot;no-refund-over-5000&quot;)" in page  # the text box now holds the file
    assert not PolicyBundle.objects.exists()


def test_a_bad_bundle_lists_every_error_and_keeps_the_version_in_force(client, acme_admin):
    policy_bundle_apply(tenant=acme_admin.tenant, text=EXAMPLE, actor=acme_admin)
    client.force_login(acme_admin)
    bad = EXAMPLE.replace("context.arguments.amount.greaterThan(decimal(\"500.00\"))",
                          "context.arguments.amuont.greaterThan(decimal(\"500.00\"))")
    page = client.post(ADD, {"source": bad, "apply": "1"}).content.decode()
    assert 'data-testid="bundle-errors"' in page and "POLICY_BUNDLE_INVALID" in page
    assert "policy refunds-over-500-need-three" in page and "amuont" in page
    big = SimpleUploadedFile("big.yaml", b"version: 1\n#" + b"x" * (10 * 1024 * 1024))
    page = client.post(ADD, {"upload": big, "apply": "1"}).content.decode()
    assert "at most 262144 are accepted" in page
    assert list(PolicyBundle.objects.values_list("version", flat=True)) == [1]


def test_a_loosening_bundle_is_sent_for_approval(client, acme_admin):
    policy_bundle_apply(tenant=acme_admin.tenant, text=LIMITED, actor=acme_admin)
    client.force_login(acme_admin)
    checked = client.post(ADD, {"source": EXAMPLE, "check": "1"}).content.decode()
    assert 'data-testid="bundle-loosens"' in checked and "limit refunds-per-order-day (refund_order) removed" in checked
    response = client.post(ADD, {"source": EXAMPLE, "apply": "1"}, follow=True)
    change = PendingControlChange.objects.get(kind="POLICY_BUNDLE")
    assert response.redirect_chain[-1][0] == reverse("admin:controlplane_pendingcontrolchange_change",
                                                     args=[change.pk])
    assert "POLICY_BUNDLE_LOOSENS" in response.content.decode()
    assert list(PolicyBundle.objects.values_list("version", flat=True)) == [1]


def test_a_platform_operator_picks_the_tenant(client, operator, people):
    globex = people["globex"]["admin"].tenant
    client.force_login(operator)
    assert client.post(ADD, {"source": EXAMPLE, "apply": "1"}).status_code == 200  # no tenant chosen
    response = client.post(ADD, {"tenant": globex.pk, "source": EXAMPLE, "apply": "1"})
    assert response.status_code == 302
    assert PolicyBundle.objects.get().tenant == globex


def test_the_pending_change_shows_the_bundle_diff_to_the_second_admin(client, acme_admin, acme_admin2):
    policy_bundle_apply(tenant=acme_admin.tenant, text=LIMITED, actor=acme_admin)
    change = policy_bundle_apply(tenant=acme_admin.tenant, text=EXAMPLE, actor=acme_admin).change
    client.force_login(acme_admin2)
    page = client.get(reverse("admin:controlplane_pendingcontrolchange_change", args=[change.pk])).content.decode()
    assert 'data-testid="pending-bundle-diff"' in page and "-  - id: refunds-per-order-day" in page
    response = client.post(reverse("admin:controlplane_pendingcontrolchange_changelist"),
                           {"action": "approve_changes", "_selected_action": [str(change.pk)]}, follow=True)
    assert "Approved and applied" in response.content.decode()
    assert list(PolicyBundle.objects.order_by("version").values_list("version", flat=True)) == [1, 2]
