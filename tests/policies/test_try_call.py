"""Try a call: the admin's dry run gives the verdict the pipeline gives (the same functions, in the
same order), names the rules and limits that decided and what shadow rules would do, and writes
nothing; its page is tenant-scoped and answers bad input with form errors."""
from __future__ import annotations

import json
import textwrap

import pytest
from django.urls import reverse

from approvals.models import ConfirmationRequest
from audit.models import AuditEvent
from policies.models import LimitUsage, ShadowVerdict
from tests.policies.support import EXAMPLE, apply, call
from tests.tools.support import REFUND_ORDER
from tools.trial import TryInvalid, limits_dry_run, try_call
from tools.gate import Gate

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_bundle_cache():
    """SQLite reuses a rolled-back bundle's row id, so another test's compiled bundle could answer."""
    from policies import selectors

    selectors._CACHE.clear()
    yield
    selectors._CACHE.clear()

SHADOWED = EXAMPLE + textwrap.indent(textwrap.dedent('''
    @id("shadow-refunds-over-100")
    @mode("shadow")
    @reason("Refunds over 100 would be handled by finance")
    forbid (principal, action == Action::"refund_order", resource)
    when { context.arguments.amount.greaterThan(decimal("100.00")) };

    @id("inventory-confirm")
    @gate("confirm")
    permit (principal, action == Action::"query_inventory", resource)
    when { context.arguments.sku == "SKU-10002" };
    '''), "  ")

WITH_LIMIT = SHADOWED + textwrap.dedent('''\
    limits:
      - id: refunds-per-order-day
        tool: refund_order
        per: order_id
        window_seconds: 86400
        max_count: 3
        when_exceeded: approval
        quorum: 4
        mode: enforce
    ''')


def refund(amount: str) -> str:
    return json.dumps({"order_id": REFUND_ORDER, "amount": amount, "reason": "damaged"})


def written() -> tuple[int, int, int, int]:
    return (ConfirmationRequest.objects.count(), AuditEvent.objects.count(), ShadowVerdict.objects.count(),
            LimitUsage.objects.count())


def test_a_large_refund_needs_the_rules_quorum_and_names_the_rule_and_version(requester):
    applied = apply(requester.tenant_id, SHADOWED)
    before = written()
    tried = try_call(requester=requester, tool_name="refund_order", arguments=refund("600"))
    assert (tried.verdict, tried.gate.policy.quorum) == ("APPROVERS", 3)
    assert tried.deciding == ("refunds-over-500-need-three",)
    assert tried.gate.version == applied.version
    assert [(s.rule_id, s.would) for s in tried.shadow] == [("shadow-refunds-over-100", "DENY")]
    assert tried.arguments["amount"] == "600.00"  # normalised as the pipeline does
    assert written() == before  # no request, no audit row, no shadow verdict, no limit usage


def test_a_forbidden_refund_is_denied_with_code_and_reason(requester):
    apply(requester.tenant_id, EXAMPLE)
    tried = try_call(requester=requester, tool_name="refund_order", arguments=refund("6000"))
    assert (tried.verdict, tried.code) == ("DENIED", "POLICY_DENIED")
    assert "handled by finance" in tried.reason and tried.deciding == ("no-refund-over-5000",)


def test_a_confirm_rule_and_no_rule_read_as_the_requesters_confirmation_and_allowed(requester):
    apply(requester.tenant_id, SHADOWED)
    confirm = try_call(requester=requester, tool_name="query_inventory", arguments='{"sku": "SKU-10002"}')
    assert (confirm.verdict, confirm.deciding) == ("REQUESTER", ("inventory-confirm",))
    allowed = try_call(requester=requester, tool_name="query_inventory", arguments='{"sku": "SKU-10001"}')
    assert (allowed.verdict, allowed.deciding, allowed.base.policy) == ("ALLOWED", (), "NONE")
    assert "runs without asking" in allowed.verdict_text


@pytest.mark.parametrize("amount", ["20", "500.00", "500.01", "560.00", "5000.01"])  # 560.00 refundable
def test_the_tried_verdict_is_the_pipelines(requester, amount):
    apply(requester.tenant_id, EXAMPLE)
    tried = try_call(requester=requester, tool_name="refund_order", arguments=refund(amount))
    outcome = call(requester, "refund_order", json.loads(refund(amount)))
    if tried.verdict == "DENIED":
        assert outcome.pending is None and outcome.result.code == tried.code
        assert outcome.result.message == tried.reason
    else:
        request = ConfirmationRequest.objects.get(pk=outcome.pending.confirmation_id)
        assert (request.policy, request.quorum) == (tried.gate.policy.policy, tried.gate.policy.quorum)
        assert (request.policy_rules or []) == list(tried.deciding)


def test_a_full_refund_is_judged_on_the_refundable_remainder(requester):
    apply(requester.tenant_id, EXAMPLE)
    tried = try_call(requester=requester, tool_name="refund_order",
                     arguments=json.dumps({"order_id": REFUND_ORDER, "reason": "damaged"}))
    assert "amount" not in tried.arguments or tried.arguments["amount"] is None
    assert tried.judged["amount"]  # what the tool fills in for policy, as in the pipeline


def test_arguments_the_pipeline_refuses_are_refused_with_its_words(requester):
    with pytest.raises(TryInvalid) as bad_json:
        try_call(requester=requester, tool_name="refund_order", arguments='{"order_id": ')
    assert bad_json.value.field == "arguments" and "not valid JSON" in bad_json.value.message
    with pytest.raises(TryInvalid) as schema:
        try_call(requester=requester, tool_name="refund_order", arguments='{"order_id": "A202607290003", "x": 1}')
    assert "INVALID_ARGUMENTS" in schema.value.message and {e["field"] for e in schema.value.errors} >= {"x"}
    with pytest.raises(TryInvalid) as money:
        try_call(requester=requester, tool_name="refund_order", arguments=refund("0.001"))
    assert money.value.errors and money.value.errors[0]["field"] == "amount"
    with pytest.raises(TryInvalid) as unknown:
        try_call(requester=requester, tool_name="launch_rocket", arguments="{}")
    assert unknown.value.field == "tool"


def test_a_tool_not_offered_to_the_requester_is_refused_as_the_pipeline_would(nobody):
    tried = try_call(requester=nobody, tool_name="refund_order", arguments=refund("20"))
    assert (tried.verdict, tried.code) == ("DENIED", "PERMISSION_DENIED")
    assert tried.refused is not None


def ran_three_refunds(requester) -> None:
    """Three refunds of 20 of the same order proposed and run (each consumed before the next is
    proposed: a newer open request for the same order would supersede the older one)."""
    for n in range(3):
        outcome = call(requester, "refund_order", json.loads(refund("20")), call_id=f"call_{n}")
        ConfirmationRequest.objects.filter(pk=outcome.pending.confirmation_id).update(status="CONSUMED")


def test_the_limits_dry_run_counts_earlier_refunds_without_reserving_and_raises_the_gate(requester):
    apply(requester.tenant_id, WITH_LIMIT)
    ran_three_refunds(requester)
    before = written()
    tried = try_call(requester=requester, tool_name="refund_order", arguments=refund("20"))
    assert written() == before  # nothing reserved, requested or audited
    assert (tried.verdict, tried.gate.policy.quorum) == ("APPROVERS", 4)
    assert tried.limits.rules == ("refunds-per-order-day",) and "refunds-per-order-day" in tried.deciding
    assert [d["id"] for d in tried.limits.details] == ["refunds-per-order-day"]


def test_the_limits_dry_run_reads_a_denial(requester):
    denying = WITH_LIMIT.replace("when_exceeded: approval", "when_exceeded: deny").replace(
        "quorum: 4", "reason: three refunds of this order today")
    assert denying != WITH_LIMIT
    apply(requester.tenant_id, denying)
    ran_three_refunds(requester)
    tried = try_call(requester=requester, tool_name="refund_order", arguments=refund("20"))
    assert (tried.verdict, tried.code) == ("DENIED", "LIMIT_EXCEEDED")
    assert "three refunds of this order today" in tried.reason


def test_no_limit_for_the_tool_means_nothing_to_judge(requester):
    apply(requester.tenant_id, WITH_LIMIT)
    tried = try_call(requester=requester, tool_name="query_inventory", arguments='{"sku": "SKU-10001"}')
    assert tried.limits.evaluated and tried.limits.rules == ()
    gate = Gate(policy=tried.base)
    from tests.tools.support import tool_context
    import uuid
    from tools.registry import registry
    assert limits_dry_run(tool_context(requester, uuid.uuid4()), registry.get("query_inventory"), gate,
                          {}).gate is gate


# -- the admin page ---------------------------------------------------------------------------------

URL = "/admin/policies/try/"


def post(client, user, **data):
    client.force_login(user)
    return client.post(URL, {"tool": "refund_order", "requester": "", "arguments": "{}", **data})


def test_a_tenant_administrator_tries_a_call_and_reads_the_rule(client, acme_admin, requester):
    apply(requester.tenant_id, SHADOWED)
    before = written()
    page = post(client, acme_admin, requester=requester.username, arguments=refund("600"))
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-verdict="APPROVERS"' in html and "needs 3 approvers" in html
    assert 'data-rule="refunds-over-500-need-three"' in html and "shadow-refunds-over-100" in html
    assert written() == before


def test_another_tenants_requester_an_unknown_tool_and_bad_json_are_form_errors(client, acme_admin, outsider,
                                                                                  requester):
    page = post(client, acme_admin, requester=outsider.username, arguments=refund("20"))
    assert "no member" in page.content.decode() and "data-verdict" not in page.content.decode()
    page = post(client, acme_admin, requester=requester.username, tool="launch_rocket")
    assert "unknown tool" in page.content.decode() and "data-verdict" not in page.content.decode()
    page = post(client, acme_admin, requester=requester.username, arguments="{not json")
    assert "not valid JSON" in page.content.decode() and "data-verdict" not in page.content.decode()
    page = post(client, acme_admin, requester=requester.username, arguments='{"order_id": "A1"}')
    assert "INVALID_ARGUMENTS" in page.content.decode() and "data-verdict" not in page.content.decode()


def test_only_administrators_reach_the_page_and_operators_try_any_tenant(client, requester, operator, outsider):
    client.force_login(requester)
    assert client.get(URL).status_code in (302, 404)
    page = post(client, operator, requester=outsider.username, arguments=json.dumps(
        {"order_id": "A202607300001", "amount": "20", "reason": "x"}))
    assert 'data-verdict="APPROVERS"' in page.content.decode()


def test_the_admin_index_lists_the_policy_pages(client, acme_admin):
    client.force_login(acme_admin)
    html = client.get(reverse("admin:index")).content.decode()
    assert reverse("admin:policies_try") in html and reverse("admin:policies_shadow") in html


def test_the_tools_precheck_is_reported_beside_the_policys_verdict(requester):
    apply(requester.tenant_id, EXAMPLE)
    tried = try_call(requester=requester, tool_name="refund_order", arguments=refund("600"))  # 560.00 refundable
    assert tried.verdict == "APPROVERS" and tried.precheck[0] == "REFUND_EXCEEDS_AMOUNT"
    assert try_call(requester=requester, tool_name="refund_order", arguments=refund("550")).precheck is None
