"""Storing a tenant's policy bundle version from the control plane: what a new version loosens
relative to the version in force, and the store itself with its CONTROL_CHANGE audit row
(docs/policy.md, "Applying a bundle"). Used by `bundles` (a direct apply) and by `applying` (a
loosening bundle approved by a second person); runs inside the caller's transaction.

A tenant's rules only tighten what the registry declares, but a new version can loosen relative to
the version in force: an enforced rule or limit that applies to a HIGH or CRITICAL tool removed,
changed (beyond its reason, or a stronger gate on the same condition) or switched to shadow. A rule
with no action constraint applies to every tool.
"""
from __future__ import annotations

import copy
import hashlib
from typing import Any

from django.db import transaction

from agentplatform.controlplane.errors import ControlChangeStale
from agentplatform.controlplane.receivers.changes import control_change
from agentplatform.tenancy.models import Tenant
from policies.catalog import CatalogEntry
from policies.compiler import Compiled, Rule, compile_stored
from policies.errors import BundleInvalid
from policies.models import PolicyBundle
from policies.services import Applied, bundle_apply

HIGH_RISKS = ("HIGH", "CRITICAL")
GATE_STRENGTH = {"confirm": 1, "approval": 2}
AUDIT_DIFF_CHARS = 4000  # a longer diff is audited as its counts and rule ids, never in full
_NOT_COMPARED = ("reason", "description", "gate", "quorum")


def _essence(node: dict[str, Any]) -> dict[str, Any]:
    """A rule's Cedar JSON without what does not change what it matches (its reason, description,
    gate and quorum, compared separately)."""
    node = copy.deepcopy(node)
    notes = node.get("annotations") or {}
    node["annotations"] = {k: v for k, v in notes.items() if k not in _NOT_COMPARED}
    return node


def _stronger_or_equal(old: Rule, new: Rule) -> bool:
    if old.effect != new.effect:
        return False
    if old.effect == "forbid":
        return True
    if GATE_STRENGTH.get(new.gate, 0) != GATE_STRENGTH.get(old.gate, 0):
        return GATE_STRENGTH.get(new.gate, 0) > GATE_STRENGTH.get(old.gate, 0)
    return new.quorum >= old.quorum


def _high(catalog: dict[str, CatalogEntry]) -> set[str]:
    return {name for name, entry in catalog.items() if entry.risk in HIGH_RISKS}


def loosenings(old: Compiled | None, new: Compiled, catalog: dict[str, CatalogEntry]) -> list[str]:
    """What `new` loosens relative to `old` (the version in force; None: the tenant has none) for
    the HIGH and CRITICAL tools of `catalog`: one sentence per enforced rule or limit removed,
    changed or switched to shadow. Empty: `new` only keeps or tightens them (adding rules or
    limits never loosens)."""
    if old is None:
        return []
    high = _high(catalog)
    why: list[str] = []
    by_id = {rule.id: (pid, rule) for pid, rule in new.rules.items()}
    for pid, rule in old.rules.items():
        if rule.shadow or not high:
            continue
        hit = sorted(rule.tools & high) if rule.tools else ["every tool"]
        if not hit:
            continue
        label = f"rule {rule.id} ({', '.join(hit)})"
        match = by_id.get(rule.id)
        if match is None:
            why.append(f"{label} removed")
        elif match[1].shadow:
            why.append(f"{label} switched to shadow")
        elif _essence(old.nodes[pid]) != _essence(new.nodes[match[0]]) or not _stronger_or_equal(rule, match[1]):
            why.append(f"{label} changed")
    limits = {limit.id: limit for limit in new.limits}
    for limit in old.limits:
        if limit.mode == "shadow" or limit.tool not in high:
            continue
        label = f"limit {limit.id} ({limit.tool})"
        other = limits.get(limit.id)
        if other is None:
            why.append(f"{label} removed")
        elif other.mode == "shadow":
            why.append(f"{label} switched to shadow")
        elif other.model_dump(exclude={"reason"}) != limit.model_dump(exclude={"reason"}):
            why.append(f"{label} changed")
    return why


def _ids(compiled: Compiled | None) -> tuple[dict[str, Any], dict[str, Any]]:
    if compiled is None:
        return {}, {}
    rules = {rule.id: (rule, _essence(compiled.nodes.get(pid, {})), rule.shadow) for pid, rule in compiled.rules.items()}
    limits = {limit.id: limit.model_dump(mode="json") for limit in compiled.limits}
    return rules, limits


def changes_summary(old: Compiled | None, new: Compiled) -> dict[str, list[str]]:
    """Rule and limit ids added, removed and changed from `old` to `new`:
    {"rules_added", "rules_removed", "rules_changed", "limits_added", "limits_removed", "limits_changed"}."""
    old_rules, old_limits = _ids(old)
    new_rules, new_limits = _ids(new)

    def compare(before: dict, after: dict, noun: str) -> dict[str, list[str]]:
        return {f"{noun}_added": sorted(set(after) - set(before)),
                f"{noun}_removed": sorted(set(before) - set(after)),
                f"{noun}_changed": sorted(k for k in set(before) & set(after) if before[k] != after[k])}

    return {**compare(old_rules, new_rules, "rules"), **compare(old_limits, new_limits, "limits")}


def in_force(tenant_id: int) -> PolicyBundle | None:
    """The tenant's bundle row in force (its highest version), or None."""
    return PolicyBundle.objects.filter(tenant_id=tenant_id).order_by("-version").first()


def compiled(row: PolicyBundle | None) -> Compiled | None:
    """`row` compiled afresh (policies.compiler.compile_stored), not from the per-process cache: the
    comparison of an apply must read exactly the row it locked. None for None."""
    if row is None:
        return None
    return compile_stored(version=row.version, cedar=row.cedar, limits=row.limits)


def bundle_store(*, tenant: Tenant, source: str, catalog: dict[str, CatalogEntry], actor: Any,
                 comment: str, old: Compiled | None, loosens: list[str], change: Any = None) -> Applied:
    """Store `source` as the tenant's next version (policies.services.bundle_apply, in the caller's
    transaction) and audit it: one CONTROL_CHANGE row, object "policy_bundle", with the version,
    the digest, the rule and limit ids added / removed / changed, the diff when it is at most
    AUDIT_DIFF_CHARS characters (else its line counts), what it loosens and the control change
    that approved it. actor: the User recorded as its author (created_by). Returns Applied
    (changed False and nothing audited for a file identical to the version in force). Raises
    BundleInvalid."""
    current = in_force(tenant.pk)
    applied = bundle_apply(tenant_id=tenant.pk, text=source, catalog=catalog, actor=actor, comment=comment)
    if not applied.changed:
        return applied
    row = PolicyBundle.objects.only("digest").get(tenant_id=tenant.pk, version=applied.version)
    added = sum(1 for line in applied.diff.splitlines() if line.startswith("+") and not line.startswith("+++"))
    removed = sum(1 for line in applied.diff.splitlines() if line.startswith("-") and not line.startswith("---"))
    new = {"version": applied.version, "digest": row.digest, "comment": comment[:500],
           "author": getattr(actor, "username", None), **changes_summary(old, applied.compiled),
           "diff": applied.diff if len(applied.diff) <= AUDIT_DIFF_CHARS else None,
           "diff_lines": f"+{added} -{removed}", "loosens": loosens,
           "control_change": str(change.pk) if change is not None else None}
    control_change(kind="policy_bundle", verb="CREATED", ident=f"{tenant.slug} v{applied.version}",
                   tenants=[tenant.pk], old={"version": current.version, "digest": current.digest} if current else None,
                   new=new)
    return applied


def bundle_store_approved(change: Any, catalog: dict[str, CatalogEntry]) -> Applied:
    """Apply the bundle of an approved POLICY_BUNDLE control change (agentplatform.controlplane.
    applying), in the caller's transaction: refused (ControlChangeStale) when another version was
    applied since the proposal or the bundle no longer validates against the catalog. Its author
    is the proposer. Returns Applied."""
    target = change.target
    tenant = Tenant.objects.select_for_update().filter(pk=change.tenant_id).first()
    if tenant is None:
        raise ControlChangeStale("refused: the tenant no longer exists / 已拒绝：状态已变化")
    current = in_force(tenant.pk)
    if (current.version if current else 0) != target["base_version"]:
        raise ControlChangeStale(
            f"refused: the bundle in force is v{current.version if current else 0}, not v{target['base_version']} "
            "it was compared with; propose it again / 已拒绝：生效的策略包已变化")
    source = target["source"]
    if hashlib.sha256(source.encode("utf-8")).hexdigest() != target["digest"]:
        raise ControlChangeStale("refused: the stored bundle does not match its digest / 已拒绝：摘要不符")
    try:
        with transaction.atomic():
            return bundle_store(tenant=tenant, source=source, catalog=catalog, actor=change.proposed_by,
                                comment=target.get("comment", ""), old=compiled(current),
                                loosens=list(change.new_state.get("loosens") or []), change=change)
    except BundleInvalid as error:
        raise ControlChangeStale(f"refused: the bundle no longer validates: {error.message} "
                                 "/ 已拒绝：策略包不再有效") from error
