"""Applying a tenant's policy bundle (docs/policy.md, "Applying a bundle"): the service behind
`manage.py policy_apply` and the bundle pages of the admin.

A bundle is validated against the tool catalog and diffed against the version in force. A bundle
that loosens a HIGH or CRITICAL tool relative to that version (bundle_store.loosenings) does not
take effect when a tenant administrator applies it: it becomes a pending control change
(kind POLICY_BUNDLE) that a second administrator of the tenant or a platform operator approves;
a platform operator, or the shell without a named person, applies it directly. Every applied
version is audited (bundle_store.bundle_store).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from agentplatform.controlplane.bundle_store import AUDIT_DIFF_CHARS, bundle_store, compiled, in_force, loosenings
from agentplatform.controlplane.deciders import may_administer
from agentplatform.controlplane.errors import ControlChangeForbidden
from agentplatform.controlplane.guards.gate import Gated
from agentplatform.controlplane.models import PendingControlChange
from agentplatform.controlplane.services import control_change_propose
from agentplatform.tenancy.actor import acting_as
from agentplatform.tenancy.models import Tenant
from agentplatform.tenancy.roles import PLATFORM_OPERATOR, admin_role
from policies.services import bundle_apply
from tools.policy_catalog import catalog as tool_catalog

LOOSENS = "POLICY_BUNDLE_LOOSENS"
PROPOSAL_DIFF_CHARS = AUDIT_DIFF_CHARS  # what a pending change (and its audit rows) keep of the diff; its
# admin page shows the whole diff against the version in force


@dataclass(frozen=True)
class BundleOutcome:
    """What `policy_bundle_apply` did.

    status: "applied" (a new version is in force), "unchanged" (identical to the version in force),
    "checked" (validated and diffed only) or "pending" (it loosens: a control change waits for a
    second person; nothing applied). version: the version in force afterwards (0: none).
    previous: the version it was compared with. diff: unified diff, version in force -> this file
    ("" when identical). loosens: what it loosens (sentences; empty when nothing). change: the
    PendingControlChange when pending. needs_second_person: applying it as this actor would be
    proposed, not applied (set for a check too).
    """

    status: str
    version: int
    previous: int
    diff: str
    loosens: list[str] = field(default_factory=list)
    change: PendingControlChange | None = None
    needs_second_person: bool = False

    @property
    def code(self) -> str:
        """POLICY_BUNDLE_LOOSENS when the bundle was sent for a second person's approval, else ""."""
        return LOOSENS if self.status == "pending" else ""


def _decoded(text: str | bytes) -> str:
    return text.decode("utf-8") if isinstance(text, bytes) else text


def policy_bundle_apply(*, tenant: Tenant, text: str | bytes, actor: Any, check: bool = False,
                        comment: str = "") -> BundleOutcome:
    """Validate `text` (a bundle file, str or UTF-8 bytes) for `tenant`, diff it against the version
    in force and, unless `check`, apply it or propose it.

    actor: the User applying it (a platform operator or an administrator of the tenant), or None
    for the shell (applies directly, audited without a person). A bundle that loosens a HIGH or
    CRITICAL tool, applied by a tenant administrator, becomes a PendingControlChange (status
    "pending", code POLICY_BUNDLE_LOOSENS) and the version in force stays. Returns BundleOutcome.
    Raises policies.errors.BundleInvalid (every problem, version in force kept) and
    ControlChangeForbidden (the actor administers neither the tenant nor the platform).
    """
    if actor is not None and not may_administer(actor, tenant.pk):
        raise ControlChangeForbidden("only an administrator of the tenant or a platform operator may apply its "
                                     "policy bundle / 仅租户管理员或平台运维可应用策略包")
    catalog = tool_catalog(tenant.pk)
    second_person = actor is not None and admin_role(actor) != PLATFORM_OPERATOR
    with acting_as(actor), transaction.atomic():
        if not check:  # one apply per tenant at a time: the comparison holds until the new version is stored
            Tenant.objects.select_for_update().filter(pk=tenant.pk).values_list("pk", flat=True).get()
        checked = bundle_apply(tenant_id=tenant.pk, text=text, catalog=catalog, actor=None, check=True)
        current = in_force(tenant.pk)
        old = compiled(current)
        why = loosenings(old, checked.compiled, catalog)
        needs = bool(why) and second_person
        unchanged = checked.diff == "" and old is not None
        if check or unchanged:
            return BundleOutcome(status="unchanged" if unchanged else "checked", version=checked.version,
                                 previous=checked.previous, diff=checked.diff, loosens=why,
                                 needs_second_person=needs and not unchanged)
        source = _decoded(text)
        if not needs:
            applied = bundle_store(tenant=tenant, source=source, catalog=catalog, actor=actor, comment=comment,
                                   old=old, loosens=why)
            return BundleOutcome(status="applied", version=applied.version, previous=applied.previous,
                                 diff=applied.diff, loosens=why)
    digest = hashlib.sha256(source.encode("utf-8")).hexdigest()
    diff = checked.diff if len(checked.diff) <= PROPOSAL_DIFF_CHARS else (
        checked.diff[:PROPOSAL_DIFF_CHARS] + f"\n... ({len(checked.diff) - PROPOSAL_DIFF_CHARS} more characters)\n")
    gated = Gated(
        PendingControlChange.Kind.POLICY_BUNDLE, tenant.pk,
        {"tenant_id": tenant.pk, "base_version": checked.previous, "digest": digest, "source": source,
         "comment": comment[:500]},
        {"version": checked.previous, "digest": current.digest if current else None},
        {"version": checked.previous + 1, "digest": digest, "loosens": why, "diff": diff},
        f"policy bundle of {tenant.slug} v{checked.previous} -> v{checked.previous + 1} loosens: {'; '.join(why)}",
        key=f"POLICY_BUNDLE:{tenant.pk}:{digest}")
    change = control_change_propose(proposer=actor, gated=gated)
    return BundleOutcome(status="pending", version=checked.previous, previous=checked.previous, diff=checked.diff,
                         loosens=why, change=change, needs_second_person=True)
