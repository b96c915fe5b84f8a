"""Guards on a HIGH/CRITICAL tool's effective policy (tools.policy): a Tool change (for every
tenant) or a TenantToolPolicy change or deletion (for one tenant) that makes it looser: a lower
risk, a weaker policy, a smaller quorum, a longer TTL. A stricter policy is never guarded.
"""
from __future__ import annotations

from typing import Any

from django.db.models.signals import pre_delete, pre_save

from agentplatform.controlplane.guards.gate import Gated, gate, stored_row
from tools.models import TenantToolPolicy, Tool
from tools.policy import POLICY_ORDER, RISK_ORDER, effective_policy, global_policy
from tools.registry import registry

HIGH_RISKS = ("HIGH", "CRITICAL")
POLICY_FIELDS_TOOL = ("risk_override", "policy_override", "quorum", "ttl_seconds", "critical_floor_waiver")
POLICY_FIELDS_TENANT = ("risk_override", "quorum", "ttl_seconds")


def _looser(old: Any, new: Any) -> list[str]:
    """What of EffectivePolicy `new` is looser than `old` (empty: as strict or stricter)."""
    why = []
    if RISK_ORDER.index(new.risk) < RISK_ORDER.index(old.risk):
        why.append(f"risk {old.risk} -> {new.risk}")
    if POLICY_ORDER.index(new.policy) < POLICY_ORDER.index(old.policy):
        why.append(f"policy {old.policy} -> {new.policy}")
    if new.policy == old.policy == "APPROVERS" and new.quorum < old.quorum:
        why.append(f"quorum {old.quorum} -> {new.quorum}")
    if new.ttl_seconds > old.ttl_seconds:
        why.append(f"TTL {old.ttl_seconds} s -> {new.ttl_seconds} s")
    return why


def _fields(obj: Any, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in names}


def _tool_pre_save(sender, instance, raw=False, **kwargs) -> None:
    if raw:
        return
    old = stored_row(sender, instance)
    spec = registry.get(instance.name)
    if old is None or spec is None:
        return
    before, after = global_policy(spec, old), global_policy(spec, instance)
    if spec.risk not in HIGH_RISKS and before.risk not in HIGH_RISKS:
        return
    why = _looser(before, after)
    if why:
        old_fields, new_fields = _fields(old, POLICY_FIELDS_TOOL), _fields(instance, POLICY_FIELDS_TOOL)
        changed = {k: v for k, v in new_fields.items() if old_fields[k] != v}
        gate([Gated("TOOL_POLICY", instance.tenant_id, {"tool_id": instance.pk, "fields": changed},
                     {k: old_fields[k] for k in changed}, changed,
                     f"loosen {instance.name} for every tenant: {', '.join(why)}", key=f"TOOL_POLICY:{instance.pk}")])


def _tenant_policy_gated(old: Any, new: Any | None) -> Gated | None:
    tool = old.tool
    spec = registry.get(tool.name)
    if spec is None:
        return None
    before, after = effective_policy(spec, tool, old), effective_policy(spec, tool, new)
    if spec.risk not in HIGH_RISKS and before.risk not in HIGH_RISKS:
        return None
    why = _looser(before, after)
    if not why:
        return None
    old_fields = _fields(old, POLICY_FIELDS_TENANT)
    if new is None:
        return Gated("TENANT_POLICY", old.tenant_id, {"policy_id": old.pk, "action": "delete"}, old_fields,
                     {"deleted": True}, f"delete the {tool.name} policy of {old.tenant.slug}: {', '.join(why)}",
                     key=f"TENANT_POLICY:{old.pk}")
    changed = {k: v for k, v in _fields(new, POLICY_FIELDS_TENANT).items() if old_fields[k] != v}
    return Gated("TENANT_POLICY", old.tenant_id, {"policy_id": old.pk, "action": "change", "fields": changed},
                 {k: old_fields[k] for k in changed}, changed,
                 f"loosen {tool.name} in {old.tenant.slug}: {', '.join(why)}", key=f"TENANT_POLICY:{old.pk}")


def _tenant_policy_pre_save(sender, instance, raw=False, **kwargs) -> None:
    if raw:
        return
    old = stored_row(sender, instance)
    if old is not None:
        gated = _tenant_policy_gated(old, instance)
        gate([gated] if gated else [])


def _tenant_policy_pre_delete(sender, instance, origin=None, **kwargs) -> None:
    # A cascade from deleting the tool or the tenant itself ends the policy with its subject.
    if getattr(origin, "model", type(origin)) is not sender:
        return
    gated = _tenant_policy_gated(instance, None)
    gate([gated] if gated else [])


def connect() -> None:
    """Connect these guards (AppConfig.ready)."""
    pre_save.connect(_tool_pre_save, sender=Tool, dispatch_uid="dualcontrol-tool-pre")
    pre_save.connect(_tenant_policy_pre_save, sender=TenantToolPolicy, dispatch_uid="dualcontrol-tenantpolicy-pre")
    pre_delete.connect(_tenant_policy_pre_delete, sender=TenantToolPolicy,
                       dispatch_uid="dualcontrol-tenantpolicy-del")
