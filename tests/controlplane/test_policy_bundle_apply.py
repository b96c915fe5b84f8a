"""Applying a policy bundle through the control plane: a tightening bundle applies at once and is
audited; one that loosens a HIGH/CRITICAL tool, applied by a tenant administrator, waits for a
second administrator or a platform operator (dual control), who applies it; an operator applies
it directly; `manage.py policy_apply` prints the diff and answers POLICY_BUNDLE_LOOSENS."""
from __future__ import annotations

import io
import textwrap

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from agentplatform.controlplane.bundle_store import loosenings
from agentplatform.controlplane.bundles import policy_bundle_apply
from agentplatform.controlplane.errors import ControlChangeForbidden, ControlChangeStale
from agentplatform.controlplane.models import PendingControlChange
from agentplatform.controlplane.services import control_change_approve, control_change_reject
from audit.models import AuditEvent
from policies.compiler import compile_bundle
from policies.documents import read_bundle
from policies.models import PolicyBundle
from tests.policies.support import EXAMPLE
from tools.policy_catalog import catalog

pytestmark = pytest.mark.django_db

TIGHTER = EXAMPLE + textwrap.dedent('''\
    limits:
      - id: refunds-per-order-day
        tool: refund_order
        per: order_id
        window_seconds: 86400
        max_count: 3
        when_exceeded: approval
        quorum: 2
    ''')
# The ceiling rule is gone: refunds over 5,000 are no longer refused.
LOOSER = textwrap.dedent('''\
    version: 1
    cedar: |
      @id("refunds-over-500-need-three")
      @gate("approval") @quorum("3")
      permit (principal, action == Action::"refund_order", resource)
      when { context.arguments.amount.greaterThan(decimal("500.00")) };
    ''')
# LOW tools only: list_orders is LOW in the registry.
LOW_ONLY = textwrap.dedent('''\
    version: 1
    cedar: |
      @id("listing-confirms")
      @gate("confirm")
      permit (principal, action == Action::"list_orders", resource);
    ''')


def _compiled(text: str):
    return compile_bundle(read_bundle(text), catalog())


def _versions(tenant_id: int) -> list[int]:
    return sorted(PolicyBundle.objects.filter(tenant_id=tenant_id).values_list("version", flat=True))


def _bundle_rows(tenant_id: int) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(tenant_id=tenant_id, decision=AuditEvent.Decision.CONTROL_CHANGE,
                                          masked_arguments__object__type="policy_bundle").order_by("chain_seq"))


# -- what loosens ---------------------------------------------------------------------------------

def test_removing_changing_or_shadowing_a_rule_of_a_critical_tool_loosens(people):
    old = _compiled(TIGHTER)
    assert loosenings(None, old, catalog()) == []
    assert loosenings(old, _compiled(TIGHTER), catalog()) == []
    assert loosenings(old, _compiled(LOOSER), catalog()) == [
        "rule no-refund-over-5000 (refund_order) removed", "limit refunds-per-order-day (refund_order) removed"]
    shadowed = TIGHTER.replace('@id("no-refund-over-5000")', '@id("no-refund-over-5000") @mode("shadow")')
    assert loosenings(old, _compiled(shadowed), catalog()) == ["rule no-refund-over-5000 (refund_order) switched to shadow"]
    higher = TIGHTER.replace('decimal("500.00")', 'decimal("900.00")')
    assert loosenings(old, _compiled(higher), catalog()) == ["rule refunds-over-500-need-three (refund_order) changed"]
    fewer = TIGHTER.replace('@quorum("3")', '@quorum("2")')
    assert loosenings(old, _compiled(fewer), catalog()) == ["rule refunds-over-500-need-three (refund_order) changed"]
    bigger_cap = TIGHTER.replace("max_count: 3", "max_count: 30")
    assert loosenings(old, _compiled(bigger_cap), catalog()) == ["limit refunds-per-order-day (refund_order) changed"]


def test_a_stronger_gate_a_new_rule_or_a_new_reason_does_not_loosen(people):
    old = _compiled(TIGHTER)
    more = TIGHTER.replace('@quorum("3")', '@quorum("4")').replace("not the assistant", "not the bot")
    assert loosenings(old, _compiled(more), catalog()) == []
    assert loosenings(_compiled(LOOSER), _compiled(EXAMPLE), catalog()) == []


def test_a_rule_on_every_tool_counts_and_a_low_tool_does_not(people):
    every = textwrap.dedent('''\
        version: 1
        cedar: |
          @id("all-confirm")
          @gate("confirm")
          permit (principal, action, resource);
        ''')
    assert loosenings(_compiled(every), _compiled(LOW_ONLY), catalog()) == ["rule all-confirm (every tool) removed"]
    empty = "version: 1\n"
    assert loosenings(_compiled(LOW_ONLY), _compiled(empty), catalog()) == []


def test_a_tool_the_tenant_raised_to_high_is_protected_like_one_declared_high(acme_admin, acme_admin2):
    """list_orders is LOW in the registry; acme raised it to HIGH, so removing acme's rule on it
    loosens a HIGH tool in acme and waits for a second person (not so in a tenant that did not)."""
    from tools.models import TenantToolPolicy

    tenant = acme_admin.tenant
    policy_bundle_apply(tenant=tenant, text=LOW_ONLY, actor=acme_admin)
    TenantToolPolicy.objects.filter(tenant=tenant, tool__name="list_orders").update(risk_override="HIGH")
    assert catalog(tenant.pk)["list_orders"].risk == "HIGH" and catalog()["list_orders"].risk == "LOW"
    outcome = policy_bundle_apply(tenant=tenant, text="version: 1\n", actor=acme_admin)
    assert (outcome.status, outcome.code) == ("pending", "POLICY_BUNDLE_LOOSENS")
    assert outcome.change.new_state["loosens"] == ["rule listing-confirms (list_orders) removed"]
    assert _versions(tenant.pk) == [1]


# -- the service ----------------------------------------------------------------------------------

def test_a_tightening_bundle_applies_at_once_and_is_audited(acme_admin):
    tenant = acme_admin.tenant
    first = policy_bundle_apply(tenant=tenant, text=EXAMPLE, actor=acme_admin, comment="first")
    assert (first.status, first.version, first.previous) == ("applied", 1, 0)
    second = policy_bundle_apply(tenant=tenant, text=TIGHTER, actor=acme_admin)
    assert (second.status, second.version, second.code) == ("applied", 2, "")
    assert "+  - id: refunds-per-order-day" in second.diff
    assert _versions(tenant.pk) == [1, 2]
    assert PolicyBundle.objects.get(tenant=tenant, version=2).created_by == acme_admin
    rows = _bundle_rows(tenant.pk)
    assert [r.masked_arguments["new"]["version"] for r in rows] == [1, 2]
    new = rows[1].masked_arguments["new"]
    assert new["limits_added"] == ["refunds-per-order-day"] and new["rules_added"] == []
    assert new["digest"] == PolicyBundle.objects.get(tenant=tenant, version=2).digest
    assert "refunds-per-order-day" in new["diff"] and rows[1].actor_id == acme_admin.pk
    assert rows[1].masked_arguments["old"]["version"] == 1


def test_the_same_file_again_is_unchanged_and_a_check_stores_nothing(acme_admin):
    tenant = acme_admin.tenant
    policy_bundle_apply(tenant=tenant, text=EXAMPLE, actor=acme_admin)
    again = policy_bundle_apply(tenant=tenant, text=EXAMPLE, actor=acme_admin)
    assert (again.status, again.version, again.diff) == ("unchanged", 1, "")
    checked = policy_bundle_apply(tenant=tenant, text=LOOSER, actor=acme_admin, check=True)
    assert checked.status == "checked" and checked.needs_second_person and checked.loosens
    assert _versions(tenant.pk) == [1] and not PendingControlChange.objects.exists()
    assert len(_bundle_rows(tenant.pk)) == 1


def test_a_loosening_bundle_from_a_tenant_admin_waits_for_a_second_admin(acme_admin, acme_admin2):
    tenant = acme_admin.tenant
    policy_bundle_apply(tenant=tenant, text=EXAMPLE, actor=acme_admin)
    outcome = policy_bundle_apply(tenant=tenant, text=LOOSER, actor=acme_admin, comment="finance agrees")
    assert (outcome.status, outcome.code, outcome.version) == ("pending", "POLICY_BUNDLE_LOOSENS", 1)
    change = outcome.change
    assert change.kind == "POLICY_BUNDLE" and change.status == "PENDING" and change.tenant_id == tenant.pk
    assert change.new_state["loosens"] == ["rule no-refund-over-5000 (refund_order) removed"]
    assert _versions(tenant.pk) == [1]
    # the proposer cannot approve it
    with pytest.raises(ControlChangeForbidden):
        control_change_approve(change_id=change.pk, approver=acme_admin)
    assert _versions(tenant.pk) == [1]
    # the same bundle proposed again is the same pending change
    assert policy_bundle_apply(tenant=tenant, text=LOOSER, actor=acme_admin).change.pk == change.pk
    control_change_approve(change_id=change.pk, approver=acme_admin2)
    assert _versions(tenant.pk) == [1, 2]
    stored = PolicyBundle.objects.get(tenant=tenant, version=2)
    assert stored.created_by == acme_admin and stored.comment == "finance agrees"
    row = _bundle_rows(tenant.pk)[-1]
    assert row.actor_id == acme_admin2.pk
    assert row.masked_arguments["new"]["control_change"] == str(change.pk)
    assert row.masked_arguments["new"]["rules_removed"] == ["no-refund-over-5000"]


def test_a_platform_operator_applies_a_loosening_bundle_directly(acme_admin, operator):
    tenant = acme_admin.tenant
    policy_bundle_apply(tenant=tenant, text=EXAMPLE, actor=acme_admin)
    outcome = policy_bundle_apply(tenant=tenant, text=LOOSER, actor=operator)
    assert (outcome.status, outcome.version) == ("applied", 2)
    assert _bundle_rows(tenant.pk)[-1].masked_arguments["new"]["loosens"] == [
        "rule no-refund-over-5000 (refund_order) removed"]
    assert not PendingControlChange.objects.exists()


def test_an_approval_after_another_version_was_applied_is_refused(acme_admin, acme_admin2):
    tenant = acme_admin.tenant
    policy_bundle_apply(tenant=tenant, text=EXAMPLE, actor=acme_admin)
    change = policy_bundle_apply(tenant=tenant, text=LOOSER, actor=acme_admin).change
    policy_bundle_apply(tenant=tenant, text=TIGHTER, actor=acme_admin)  # v2 meanwhile
    with pytest.raises(ControlChangeStale, match="bundle in force is v2"):
        control_change_approve(change_id=change.pk, approver=acme_admin2)
    change.refresh_from_db()
    assert change.status == "REFUSED" and _versions(tenant.pk) == [1, 2]


def test_a_rejected_loosening_changes_nothing(acme_admin, acme_admin2):
    tenant = acme_admin.tenant
    policy_bundle_apply(tenant=tenant, text=EXAMPLE, actor=acme_admin)
    change = policy_bundle_apply(tenant=tenant, text=LOOSER, actor=acme_admin).change
    control_change_reject(change_id=change.pk, decider=acme_admin2, reason="no")
    assert _versions(tenant.pk) == [1]


def test_another_tenants_admin_and_a_member_may_not_apply(acme_admin, globex_admin, requester):
    for actor in (globex_admin, requester):
        with pytest.raises(ControlChangeForbidden):
            policy_bundle_apply(tenant=acme_admin.tenant, text=EXAMPLE, actor=actor)
    assert _versions(acme_admin.tenant_id) == []


def test_another_tenant_cannot_see_or_approve_the_change(acme_admin, globex_admin):
    from agentplatform.controlplane.errors import ControlChangeNotFound

    policy_bundle_apply(tenant=acme_admin.tenant, text=EXAMPLE, actor=acme_admin)
    change = policy_bundle_apply(tenant=acme_admin.tenant, text=LOOSER, actor=acme_admin).change
    with pytest.raises(ControlChangeNotFound):
        control_change_approve(change_id=change.pk, approver=globex_admin)
    assert _versions(acme_admin.tenant_id) == [1]


# -- the command ----------------------------------------------------------------------------------

def _command(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("policy_apply", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_the_command_prints_the_diff_and_the_new_version(people, tmp_path):
    path = tmp_path / "bundle.yaml"
    path.write_text(EXAMPLE)
    out, _ = _command("--tenant", "acme", str(path), "--check")
    assert "+++ v1" in out and "valid: would become acme v1" in out
    assert _versions(people["acme"]["admin"].tenant_id) == []
    out, _ = _command("--tenant", "acme", str(path), "--comment", "from the shell")
    assert "applied: acme v1 is in force (was v0)" in out and '+  @id("no-refund-over-5000")' in out
    row = _bundle_rows(people["acme"]["admin"].tenant_id)[-1]
    assert row.actor_id is None and row.masked_arguments["actor_role"] == "shell (manage.py policy_apply)"
    out, _ = _command("--tenant", "acme", str(path))
    assert out.strip() == "unchanged: acme v1 is in force"


def test_the_command_answers_loosens_with_the_pending_change(people, tmp_path):
    first, second = tmp_path / "v1.yaml", tmp_path / "v2.yaml"
    first.write_text(EXAMPLE)
    second.write_text(LOOSER)
    _command("--tenant", "acme", str(first))
    with pytest.raises(CommandError) as raised:
        _command("--tenant", "acme", str(second), "--as", people["acme"]["admin"].username)
    change = PendingControlChange.objects.get(status="PENDING")
    assert raised.value.returncode == 3 and str(raised.value) == f"POLICY_BUNDLE_LOOSENS {change.pk}"
    assert _versions(people["acme"]["admin"].tenant_id) == [1]


def test_the_command_prints_every_error_of_a_bad_bundle(people, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(textwrap.dedent('''\
        version: 1
        cedar: |
          @id("a") @gate("confirm")
          permit (principal, action == Action::"refund_order", resource)
          when { context.arguments.amuont.greaterThan(decimal("1.00")) };
        limits:
          - {id: l, tool: nope, per: user, window_seconds: 60, max_count: 1, when_exceeded: deny}
        '''))
    err = io.StringIO()
    with pytest.raises(CommandError) as raised:
        call_command("policy_apply", "--tenant", "acme", str(path), stdout=io.StringIO(), stderr=err)
    assert raised.value.returncode == 1 and "POLICY_BUNDLE_INVALID: 2 error(s)" in str(raised.value)
    assert "policy a: attribute `arguments.amuont`" in err.getvalue()
    assert "limit l: unknown tool 'nope'" in err.getvalue()


# -- concurrency (PostgreSQL) ---------------------------------------------------------------------

@pytest.mark.postgres
def test_concurrent_applies_take_distinct_versions_and_a_loosening_never_slips_through(
        transactional_db, people, operator):
    """An operator adds a limit while a tenant administrator applies a bundle without it: whichever
    order the row lock gives them, the administrator's bundle is compared with the version actually
    in force, so it is applied only if it came first and proposed if the limit was already there."""
    from tests.tools.support import race
    from agentplatform.tenancy.models import User

    acme_admin = people["acme"]["admin"]
    tenant = acme_admin.tenant
    policy_bundle_apply(tenant=tenant, text=EXAMPLE, actor=acme_admin)
    extra = EXAMPLE.rstrip("\n") + '\n\n  @id("cancels-confirm")\n  @gate("confirm")\n' \
        '  permit (principal, action == Action::"cancel_order", resource);\n'
    plan = [(operator.pk, TIGHTER), (acme_admin.pk, extra)] * 3
    results = race(len(plan), lambda i: (User.objects.get(pk=plan[i][0]), plan[i][1]),
                   lambda state: policy_bundle_apply(tenant=tenant, text=state[1], actor=state[0]))
    assert not [r for r in results if isinstance(r, BaseException)], results
    versions = list(PolicyBundle.objects.filter(tenant=tenant).order_by("version"))
    assert [v.version for v in versions] == list(range(1, len(versions) + 1))
    for before, after in zip(versions, versions[1:]):
        if after.created_by_id == acme_admin.pk:
            assert loosenings(_compiled(before.source), _compiled(after.source), catalog()) == [], (
                before.version, after.version)
    statuses = sorted({r.status for r in results})
    assert set(statuses) <= {"applied", "unchanged", "pending"}
