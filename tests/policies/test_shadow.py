"""Shadow mode: a shadow rule is judged and recorded on every proposed call, counted in the metric,
never enforced; the admin's shadow report counts what each rule would have done in a period and
links each count to the calls, tenant-scoped (operators see every tenant)."""
from __future__ import annotations

import datetime
import re
import textwrap
import uuid

import pytest
from prometheus_client import REGISTRY

from approvals.models import ConfirmationRequest
from core import clock
from policies.models import ShadowVerdict
from policies.shadow import shadow_report, shadow_summary
from tests.policies.support import apply, call
from tests.tools.support import REFUND_ORDER

pytestmark = pytest.mark.django_db

SHADOW = textwrap.dedent('''\
    version: 1
    cedar: |
      @id("shadow-no-refund-over-100")
      @mode("shadow")
      @reason("Refunds over 100 would go to finance")
      forbid (principal, action == Action::"refund_order", resource)
      when { context.arguments.amount.greaterThan(decimal("100.00")) };

      @id("shadow-inventory-needs-two")
      @mode("shadow")
      @gate("approval") @quorum("2")
      permit (principal, action == Action::"query_inventory", resource);
    ''')


@pytest.fixture(autouse=True)
def _fresh_bundle_cache():
    """SQLite reuses a rolled-back bundle's row id, so another test's compiled bundle could answer."""
    from policies import selectors

    selectors._CACHE.clear()
    yield
    selectors._CACHE.clear()


def metric(rule: str, would: str) -> float:
    return REGISTRY.get_sample_value("agentplatform_policy_shadow_verdicts_total", {"rule": rule, "would": would}) or 0


def test_a_shadow_forbid_is_recorded_and_counted_but_the_call_goes_on(requester):
    applied = apply(requester.tenant_id, SHADOW)
    before = metric("shadow-no-refund-over-100", "DENY")
    conversation = uuid.uuid4()
    outcome = call(requester, "refund_order", {"order_id": REFUND_ORDER, "amount": "300.00", "reason": "damaged"},
                   conversation_id=conversation, call_id="call_refund")
    assert outcome.pending is not None and outcome.result.code != "POLICY_DENIED"  # not enforced: it waits as before
    request = ConfirmationRequest.objects.get(pk=outcome.pending.confirmation_id)
    assert (request.quorum, request.policy_rules) == (2, None)  # the registry's gate, no rule named
    verdict = ShadowVerdict.objects.get(tenant_id=requester.tenant_id)
    assert (verdict.rule_id, verdict.would, verdict.bundle_version, verdict.tool_call_id, verdict.conversation_id,
            verdict.user_id) == ("shadow-no-refund-over-100", "DENY", applied.version, "call_refund", conversation,
                                 requester.pk)
    assert metric("shadow-no-refund-over-100", "DENY") == before + 1


def test_a_shadow_approval_rule_leaves_the_call_ungated(requester):
    apply(requester.tenant_id, SHADOW)
    before = metric("shadow-inventory-needs-two", "APPROVAL")
    outcome = call(requester, "query_inventory", {"sku": "SKU-10001"})
    assert outcome.pending is None and outcome.result.success  # it ran, nobody was asked
    assert not ConfirmationRequest.objects.filter(tenant_id=requester.tenant_id).exists()
    verdict = ShadowVerdict.objects.get(tenant_id=requester.tenant_id)
    assert (verdict.would, verdict.quorum) == ("APPROVAL", 2)
    assert metric("shadow-inventory-needs-two", "APPROVAL") == before + 1


def test_a_call_no_shadow_rule_matches_records_nothing(requester):
    apply(requester.tenant_id, SHADOW)
    call(requester, "refund_order", {"order_id": REFUND_ORDER, "amount": "20.00", "reason": "damaged"})
    assert not ShadowVerdict.objects.exists()


def verdicts(tenant, rule: str, would: str, n: int, *, days_ago: float = 0, quorum=None) -> None:
    rows = ShadowVerdict.objects.bulk_create(
        ShadowVerdict(tenant=tenant, bundle_version=1, rule_id=rule, would=would, tool_name="refund_order",
                      tool_call_id=f"call_{rule}_{would}_{i}_{days_ago}", quorum=quorum) for i in range(n))
    when = clock.now() - datetime.timedelta(days=days_ago)
    ShadowVerdict.objects.filter(pk__in=[r.pk for r in rows]).update(occurred_at=when)


def test_the_summary_counts_per_rule_and_verdict_in_the_period(requester, outsider):
    acme, globex = requester.tenant, outsider.tenant
    verdicts(acme, "big-refunds", "APPROVAL", 37, quorum=2)
    verdicts(acme, "big-refunds", "DENY", 2)
    verdicts(acme, "big-refunds", "DENY", 5, days_ago=10)  # before the period
    verdicts(globex, "globex-rule", "DENY", 1)
    now = clock.now()
    since, until = now - datetime.timedelta(days=7), now + datetime.timedelta(seconds=1)
    assert shadow_summary(tenant_id=acme.pk, since=since, until=until) == [
        {"tenant_id": acme.pk, "rule_id": "big-refunds", "would": "APPROVAL", "calls": 37},
        {"tenant_id": acme.pk, "rule_id": "big-refunds", "would": "DENY", "calls": 2}]
    everyone = shadow_report(tenant_id=None, since=since, until=until)
    assert [(r["tenant_id"], r["rule_id"], r["counts"], r["total"]) for r in everyone] == sorted([
        (acme.pk, "big-refunds", {"APPROVAL": 37, "DENY": 2}, 39), (globex.pk, "globex-rule", {"DENY": 1}, 1)])


# -- the admin pages ---------------------------------------------------------------------------------

REPORT, CALLS = "/admin/policies/shadow/", "/admin/policies/shadow/calls/"


def test_the_report_says_what_each_rule_would_have_done_and_links_the_calls(client, acme_admin, requester, outsider):
    verdicts(requester.tenant, "big-refunds", "APPROVAL", 37, quorum=2)
    verdicts(requester.tenant, "big-refunds", "DENY", 2)
    verdicts(outsider.tenant, "globex-rule", "DENY", 1)
    client.force_login(acme_admin)
    html = client.get(REPORT).content.decode()
    assert "would have required approval for" in html and ">37 calls</a>" in html
    assert "would have denied" in html and ">2 calls</a>" in html
    assert "globex-rule" not in html  # another tenant's rules are not shown
    listing = client.get(CALLS, {"rule": "big-refunds", "would": "DENY"}).content.decode()
    assert listing.count('data-testid="shadow-call-audit"') == 2 and "call_big-refunds_DENY_0" in listing
    assert "/admin/audit/auditevent/?tool_call_id=call_big-refunds_DENY_" in listing
    # A tenant administrator cannot read another tenant's verdicts by naming it.
    other = client.get(CALLS, {"rule": "globex-rule", "tenant": outsider.tenant_id}).content.decode()
    assert "call_globex-rule" not in other


def test_the_period_is_chosen_with_from_and_to(client, acme_admin, requester):
    verdicts(requester.tenant, "big-refunds", "DENY", 3, days_ago=10)
    client.force_login(acme_admin)
    assert "big-refunds" not in client.get(REPORT).content.decode()  # the last 7 days by default
    start = (clock.now() - datetime.timedelta(days=11)).date().isoformat()
    end = (clock.now() - datetime.timedelta(days=9)).date().isoformat()
    html = client.get(REPORT, {"start": start, "end": end}).content.decode()
    assert ">3 calls</a>" in html
    assert f"start={start}" in html  # the links to the calls keep the period
    html = client.get(REPORT, {"start": end, "end": start}).content.decode()
    assert "is after" in html


def test_operators_see_every_tenant(client, operator, requester, outsider):
    verdicts(requester.tenant, "big-refunds", "DENY", 1)
    verdicts(outsider.tenant, "globex-rule", "CONFIRM", 4)
    client.force_login(operator)
    html = client.get(REPORT).content.decode()
    assert "big-refunds" in html and "globex-rule" in html
    assert "would have required the requester&#x27;s confirmation for" in html or "confirmation for" in html
    listing = client.get(CALLS, {"rule": "globex-rule", "tenant": outsider.tenant_id}).content.decode()
    assert listing.count('data-testid="shadow-call-audit"') == 4


def test_a_requester_cannot_read_the_report(client, requester):
    client.force_login(requester)
    assert client.get(REPORT).status_code in (302, 404)


def test_the_audit_link_finds_the_calls_rows(client, acme_admin, requester):
    apply(requester.tenant_id, SHADOW)
    call(requester, "refund_order", {"order_id": REFUND_ORDER, "amount": "300.00", "reason": "damaged"},
         call_id="call_shadowed")
    client.force_login(acme_admin)
    listing = client.get(CALLS, {"rule": "shadow-no-refund-over-100", "would": "DENY"}).content.decode()
    link = re.search(r'href="(/admin/audit/auditevent/\?[^"]+)"', listing).group(1).replace("&amp;", "&")
    page = client.get(link)
    assert page.status_code == 200 and page.context["cl"].result_count >= 1
    assert {row.tool_call_id for row in page.context["cl"].result_list} == {"call_shadowed"}
