"""The tool catalog as policy sees it (policies.catalog.CatalogEntry): what a bundle is validated
against and what a call's Cedar context is typed from. Built from the registry (tools in code)
and the Tool rows (remote tools), so policies needs nothing of the tools app."""
from __future__ import annotations

import typing
from decimal import Decimal
from typing import Any

from policies.catalog import CatalogEntry
from tools.models import TenantToolPolicy, Tool
from tools.policy import RISK_ORDER, global_policy
from tools.registry import ToolSpec, registry

_ENTRIES: dict[tuple[str, type, tuple[str, ...], str], CatalogEntry] = {}


def _is_decimal(annotation: Any) -> bool:
    if annotation is Decimal:
        return True
    return any(_is_decimal(arg) for arg in typing.get_args(annotation))


def catalog_entry(spec: ToolSpec, *, risk: str | None = None) -> CatalogEntry:
    """The CatalogEntry of `spec` (cached per name, parameter model, fills and risk): its JSON
    Schema, its Decimal arguments (Cedar `decimal`) and the arguments it fills for policy."""
    risk = risk or spec.risk
    key = (spec.name, spec.parameters, spec.policy_fills, risk)
    entry = _ENTRIES.get(key)
    if entry is None:
        decimals = frozenset(name for name, info in spec.parameters.model_fields.items()
                             if _is_decimal(info.annotation))
        entry = _ENTRIES[key] = CatalogEntry(name=spec.name, json_schema=spec.parameters.model_json_schema(),
                                             decimals=decimals, fills=frozenset(spec.policy_fills), risk=risk)
    return entry


def catalog(tenant_id: int | None = None) -> dict[str, CatalogEntry]:
    """Tool name -> CatalogEntry for every tool a bundle may name: each Tool row with a spec (tools
    in code and reviewed remote tools), enabled or not (a bundle may be written before a tool is
    switched on). Each entry's `risk` is the strictest of the registry's, the operator's global
    override and (with `tenant_id`) the tenant's own override, so a tool raised to HIGH is
    protected like one declared HIGH (a bundle loosening it needs a second person). Two queries."""
    overrides = dict(TenantToolPolicy.objects.filter(tenant_id=tenant_id).exclude(risk_override="")
                     .values_list("tool__name", "risk_override")) if tenant_id is not None else {}
    entries = {}
    for row in Tool.objects.all():
        spec = registry.get(row.name)
        if spec is not None:
            risks = [spec.risk, global_policy(spec, row).risk, overrides.get(row.name) or spec.risk]
            entries[row.name] = catalog_entry(spec, risk=max(risks, key=RISK_ORDER.index))
    return entries
