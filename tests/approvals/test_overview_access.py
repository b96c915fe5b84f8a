"""Who reads the approval overview (/approvals/overview/), of which tenant, and what it shows."""
from __future__ import annotations

import datetime
import re

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from agentplatform.tenancy.models import User
from approvals.models import Approval
from core import clock
from tests.approvals.quality_support import decide, gated_request, view

URL = "/approvals/overview/"


@pytest.fixture
def acme_auditor(people):
    """A read-only member of acme holding the auditor permission (a user grant)."""
    user = User.objects.create(username="acme-auditor-test", tenant=people["acme"]["requester"].tenant)
    user.user_permissions.add(Permission.objects.get(content_type__app_label="audit", codename="export_auditevent"))
    return User.objects.get(pk=user.pk)


def _get(client, user, path=URL):
    client.force_login(user)
    return client.get(path)


def test_the_url_name():
    assert reverse("approvals:overview") == URL


def test_administrator_and_auditor_read_their_tenant(client, acme_admin, acme_auditor):
    for user in (acme_admin, acme_auditor):
        response = _get(client, user)
        assert response.status_code == 200
        assert user.tenant.name in response.content.decode()


def test_another_tenant_is_not_found(client, acme_admin, acme_auditor, globex_admin):
    for user in (acme_admin, acme_auditor):
        assert _get(client, user, f"{URL}?tenant=globex").status_code == 404
    assert _get(client, globex_admin, f"{URL}?tenant=acme").status_code == 404
    assert _get(client, acme_admin, f"{URL}?tenant=acme").status_code == 200  # naming their own is fine


@pytest.mark.parametrize("persona", ["requester", "approver1", "nobody"])
def test_requesters_and_approvers_are_refused(client, people, persona):
    assert _get(client, people["acme"][persona]).status_code == 403


def test_signed_out_goes_to_sign_in(client, db):
    response = client.get(URL)
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_an_operator_picks_a_tenant(client, operator, outsider):
    response = _get(client, operator, f"{URL}?tenant=globex")
    assert response.status_code == 200 and outsider.tenant.name in response.content.decode()
    assert 'name="tenant"' in response.content.decode()  # the picker
    assert _get(client, operator, f"{URL}?tenant=no-such-tenant").status_code == 404


def test_the_page_shows_its_tenant_numbers_only(client, acme_admin, requester, approver1, outsider,
                                                outsider_approver):
    now = clock.now()
    mine = gated_request(requester, created=now - datetime.timedelta(hours=1))
    view(mine, approver1, seconds=30)
    decide(mine, approver1, Approval.Decision.APPROVE, seconds=35)  # fast: 5 s after opening
    theirs = gated_request(outsider, created=now - datetime.timedelta(hours=1))
    decide(theirs, outsider_approver, Approval.Decision.REJECT, seconds=9)

    body = _get(client, acme_admin, f"{URL}?days=7").content.decode()

    rows = re.findall(r'data-testid="approver-row" data-key="(\d+)"', body)
    assert rows == [str(approver1.pk)]
    assert re.search(r'data-testid="total-decisions">1<', body)
    assert re.search(r'data-testid="total-median">35 s<', body)
    assert re.search(r'data-testid="total-fast">1 <small>\(100%\)', body)
    assert "Refund an order / 订单退款" in body  # the tool's title, not its wire name
    assert ">refund_order<" not in body


def test_bad_days_fall_back_to_thirty(client, acme_admin):
    body = _get(client, acme_admin, f"{URL}?days=abc").content.decode()
    assert "the last 30 days" in body


def test_the_navigation_links_the_overview_for_those_who_may_read_it(client, acme_admin, acme_auditor, requester):
    assert 'data-testid="nav-overview"' in _get(client, acme_admin, "/approvals/mine/").content.decode()
    assert 'data-testid="nav-overview"' in _get(client, acme_auditor, "/approvals/mine/").content.decode()
    assert 'data-testid="nav-overview"' not in _get(client, requester, "/approvals/mine/").content.decode()


def test_an_operator_naming_a_tenant_with_a_nul_gets_not_found(client, operator):
    assert _get(client, operator, f"{URL}?tenant=acme%00").status_code == 404
