"""The admin pages a tenant administrator uses, and /api/docs/, in Chromium: no serious or critical
axe-core violation, and no horizontal overflow of the page at 1360 px (a laptop) and 390 px (a
phone). Screenshots of a failing page: test-artifacts/browser/admin-fit-<page>-<width>.png."""
from __future__ import annotations

import pytest

from agentplatform.runtime import services
from agentplatform.runtime.demo.seed import DEMO_PASSWORD
from approvals.models import ConfirmationRequest
from audit.models import AuditEvent
from policies.models import PolicyBundle
from tests.browser.conftest import PHONE, named_shot
from tests.browser.test_newcomers import _axe
from tools.models import TenantToolPolicy, Tool

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def cancel_story(requester):
    """A request waiting for the requester's confirmation: the confirmations and audit lists have rows."""
    outcome = services.chat_send(user=requester, message="Please cancel order A202607290001 because it is late")
    assert outcome.pending
    return outcome


def _pages(admin_user, requester) -> list[tuple[str, str]]:
    group = admin_user.tenant.groups.first().group
    entry = TenantToolPolicy.objects.filter(tenant=admin_user.tenant).first()
    pages = [
        ("index", "/admin/"),
        ("users", "/admin/tenancy/user/"),
        ("user", f"/admin/tenancy/user/{requester.pk}/change/"),
        ("roles", f"/admin/tenancy/user/{requester.pk}/roles/"),
        ("groups", "/admin/auth/group/"),
        ("group", f"/admin/auth/group/{group.pk}/change/"),
        ("tools", "/admin/tools/tool/"),
        ("tool", f"/admin/tools/tool/{Tool.objects.get(name='refund_order').pk}/change/"),
        ("effective-access", f"/admin/tools/tool/effective-access/?user={requester.pk}"),
        ("whitelist", "/admin/tools/tenanttoolpolicy/"),
        ("whitelist-entry", f"/admin/tools/tenanttoolpolicy/{entry.pk}/change/"),
        ("audit-events", "/admin/audit/auditevent/"),
        ("confirmations", "/admin/approvals/confirmationrequest/"),
        ("pending-changes", "/admin/controlplane/pendingcontrolchange/"),
        ("policy-bundles", "/admin/policies/policybundle/"),
        ("policy-try", "/admin/policies/try/"),
        ("policy-shadow", "/admin/policies/shadow/"),
        ("kill-switches", "/admin/policies/killswitch/"),
    ]
    bundle = PolicyBundle.objects.filter(tenant=admin_user.tenant).first()
    if bundle is not None:
        pages.append(("policy-bundle", f"/admin/policies/policybundle/{bundle.pk}/change/"))
    return pages


def _overflow(person) -> int:
    """How many CSS pixels the page is wider than the window (0: no horizontal scrolling)."""
    return person.page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")


def _table_overflow(person) -> int:
    """How many CSS pixels the widest admin table is wider than its box (0: it fits, no scrolling
    inside the page either)."""
    return person.page.evaluate("""() => Math.max(0, ...Array.from(
        document.querySelectorAll('#changelist .results, .admin-table-scroll'),
        box => box.scrollWidth - box.clientWidth))""")


def test_admin_pages_and_api_docs_have_no_serious_violations_and_fit_1360_and_390(open_person, acme_admin,
                                                                                   requester, cancel_story):
    assert AuditEvent.objects.filter(tenant=acme_admin.tenant).exists() and ConfirmationRequest.objects.exists()
    problems: list[str] = []
    for width, options in (("1360", {}), ("390", PHONE)):
        admin = open_person(f"admin-{width}", **options)
        admin.sign_in(acme_admin.username, DEMO_PASSWORD, next_path="/admin/")
        for label, path in [*_pages(acme_admin, requester), ("api-docs", "/api/docs/")]:
            admin.goto(path)
            if label == "api-docs":
                admin.page.wait_for_selector(".swagger-ui .information-container")
            assert admin.page.locator("body").count() == 1
            over = _overflow(admin)
            if over > 1:
                problems.append(f"{label} at {width} px: {over} px wider than the window")
                named_shot(admin, f"admin-fit-{label}-{width}.png")
            if width == "1360":
                inner = _table_overflow(admin)
                if inner > 1:
                    problems.append(f"{label} at 1360 px: a table {inner} px wider than its box")
                    named_shot(admin, f"admin-fit-{label}-table.png")
                problems += _axe(admin, f"admin-{label}")
    assert not problems, "\n".join(problems)
