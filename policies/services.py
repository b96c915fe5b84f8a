"""Applying a policy bundle to a tenant (docs/policy.md, "Applying a bundle").

`bundle_apply` parses, validates against the tool catalog, diffs against the version in force and,
unless only checking, stores the next version. A refused bundle changes nothing: the version in
force stays in force.
"""
from __future__ import annotations

import difflib
import hashlib
from dataclasses import dataclass

from django.db import transaction

from agentplatform.tenancy.models import Tenant
from policies.catalog import CatalogEntry
from policies.compiler import Compiled, compile_bundle
from policies.documents import read_bundle
from policies.models import PolicyBundle


@dataclass(frozen=True)
class Applied:
    """The outcome of `bundle_apply`. version: the version now in force (the new one, or the
    current one when only checking or nothing changed; 0 when the tenant has none). previous: the
    version it replaced (0: none). diff: unified diff of the bundle file, current -> new ("" when
    identical). changed: a new version was stored. compiled: the validated bundle."""

    version: int
    previous: int
    diff: str
    changed: bool
    compiled: Compiled


def bundle_diff(old: str, new: str, *, old_name: str = "current", new_name: str = "new") -> str:
    """Unified diff (text) of two bundle files; "" when they are identical."""
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                 fromfile=old_name, tofile=new_name)
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def bundle_check(*, tenant_id: int, text: str | bytes, catalog: dict[str, CatalogEntry]) -> Applied:
    """Validate `text` for the tenant and diff it against the version in force, storing nothing.
    Returns Applied(changed=False). Raises BundleInvalid."""
    return bundle_apply(tenant_id=tenant_id, text=text, catalog=catalog, actor=None, check=True)


def bundle_apply(*, tenant_id: int, text: str | bytes, catalog: dict[str, CatalogEntry], actor,
                 check: bool = False, comment: str = "") -> Applied:
    """Apply `text` (a bundle file) as the tenant's next version.

    catalog: tool name -> CatalogEntry (tools.policy_catalog.catalog()). actor: the User applying
    it (None for a check). check: validate and diff only. An identical file stores nothing.
    Returns Applied. Raises BundleInvalid (the version in force is kept). Serialised per tenant
    by a lock on the tenant's row, so two applies never take the same version number.
    """
    raw = text.encode("utf-8") if isinstance(text, str) else text
    document = read_bundle(raw)
    source = raw.decode("utf-8")
    with transaction.atomic():
        if not check:
            Tenant.objects.select_for_update().filter(pk=tenant_id).values_list("pk", flat=True).get()
        current = PolicyBundle.objects.filter(tenant_id=tenant_id).order_by("-version").first()
        previous = current.version if current else 0
        compiled = compile_bundle(document, catalog, version=previous + 1)
        diff = bundle_diff(current.source if current else "", source,
                           old_name=f"v{previous}" if current else "(none)", new_name=f"v{previous + 1}")
        if check or (current is not None and current.source == source):
            return Applied(version=previous, previous=previous, diff=diff, changed=False, compiled=compiled)
        PolicyBundle.objects.create(
            tenant_id=tenant_id, version=previous + 1, source=source, cedar=document.cedar,
            limits=[limit.model_dump(mode="json") for limit in document.limits],
            digest=hashlib.sha256(raw).hexdigest(), created_by=actor, comment=comment[:500])
        return Applied(version=previous + 1, previous=previous, diff=diff, changed=True, compiled=compiled)
