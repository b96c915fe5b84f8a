"""The rules that gated a request are named where people decide and follow it: the approver's card
(dashboard and the request's own page), My requests, and the approvals and my-requests APIs
(`policy_version`, `policy_rules`); a request the registry's policy gated names none."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.api.conftest import authorization_header
from tests.policies.support import EXAMPLE, apply, call
from tests.tools.support import REFUND_ORDER

pytestmark = pytest.mark.django_db

RULE = "refunds-over-500-need-three"


@pytest.fixture(autouse=True)
def _fresh_bundle_cache():
    """SQLite reuses a rolled-back bundle's row id, so another test's compiled bundle could answer."""
    from policies import selectors

    selectors._CACHE.clear()
    yield
    selectors._CACHE.clear()


def api(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=authorization_header(user))
    return client


def refund(user, amount: str):
    return call(user, "refund_order", {"order_id": REFUND_ORDER, "amount": amount, "reason": "damaged"})


def test_the_card_and_the_requests_page_name_the_rule_and_the_bundle_version(client, requester, approver1):
    applied = apply(requester.tenant_id, EXAMPLE)
    request_id = refund(requester, "550.00").pending.confirmation_id
    client.force_login(approver1)
    for url in ("/approvals/", f"/approvals/{request_id}/"):
        html = client.get(url).content.decode()
        assert f'data-rules="{RULE}"' in html, url
        assert f"Gated by policy rule <code class=\"policy-rule\">{RULE}</code> (bundle v{applied.version})" in html
        assert f"由策略规则 {RULE}（策略包 v{applied.version}）设定" in html
    client.force_login(requester)
    assert f'data-rules="{RULE}"' in client.get("/approvals/mine/").content.decode()


def test_a_request_the_registry_gated_names_no_rule(client, requester, approver1):
    apply(requester.tenant_id, EXAMPLE)
    refund(requester, "20.00")
    client.force_login(approver1)
    html = client.get("/approvals/").content.decode()
    assert 'data-testid="request-card"' in html and 'data-testid="policy-rules"' not in html


def test_the_apis_expose_the_version_and_the_rules(requester, approver1):
    applied = apply(requester.tenant_id, EXAMPLE)
    large = refund(requester, "550.00").pending.confirmation_id
    [item] = api(approver1).get("/api/v1/approvals/").json()["results"]
    assert (item["id"], item["policy_version"], item["policy_rules"]) == (str(large), applied.version, [RULE])
    [mine] = api(requester).get("/api/v1/my-requests/").json()["results"]
    assert (mine["policy_version"], mine["policy_rules"]) == (applied.version, [RULE])


def test_without_a_bundle_the_apis_say_so(requester, approver1):
    refund(requester, "20.00")
    [item] = api(approver1).get("/api/v1/approvals/").json()["results"]
    assert (item["policy_version"], item["policy_rules"]) == (None, [])
    [mine] = api(requester).get("/api/v1/my-requests/").json()["results"]
    assert (mine["policy_version"], mine["policy_rules"]) == (None, [])
