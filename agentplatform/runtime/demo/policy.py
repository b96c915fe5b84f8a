"""The demo's policy bundles: what `manage.py demo` sets up before it plays refunds by rules.

- The platform operator lowers refund_order's registry gate (CRITICAL: two approvers) to the
  requester's confirmation, with a written `critical_floor_waiver` (risk HIGH, policy REQUESTER):
  a global change, audited in every tenant's control-plane trail. Only the demo does this; the
  seeded personas and tools (agentplatform.runtime.demo.seed) stay as they are.
- acme's bundle (acme_bundle.yaml) puts the gate back where the money is: refunds over 500 need
  two approvers, refunds over 5,000 are refused with finance's reason, at most 3 refunds of one
  order a day, more than 300.00 on one order a day needs two approvers.
- globex's bundle (globex_bundle.yaml) keeps every globex refund at two approvers.
- Two orders only the demo uses (POLICY_ORDERS), created when missing and reset by every run.
"""
from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from agentplatform.runtime.demo.seed import WAIVED, WAIVER, is_demo_waiver, order_id
from agentplatform.tenancy.actor import acting_via
from agentplatform.tenancy.models import Tenant, User
from policies.models import LimitUsage
from policies.services import Applied, bundle_apply
from tools.catalog.models import Order
from tools.models import Tool
from tools.policy_catalog import catalog

HERE = Path(__file__).resolve().parent
BUNDLES = {"acme": HERE / "acme_bundle.yaml", "globex": HERE / "globex_bundle.yaml"}
# suffix, amount: acme orders the policy steps refund (limit: 0008; over the ceiling: 0009)
POLICY_ORDERS = (("0008", "800.00"), ("0009", "8000.00"))


@dataclass(frozen=True)
class Bundles:
    """What `policy_setup` did. waived: the operator's waiver was written now (False: already in
    place). applied: tenant slug -> Applied (version, diff, changed)."""

    waived: bool
    applied: dict[str, Applied]


def _waive() -> bool:
    tool = Tool.objects.get(name="refund_order")
    if is_demo_waiver(tool):
        return False
    for key, value in {**WAIVED, "critical_floor_waiver": WAIVER}.items():
        setattr(tool, key, value)
    tool.full_clean()
    # Written from the server's shell (what `manage.py demo` is): the control-plane trail records it
    # with this channel as its actor, in every tenant's trail.
    with acting_via("shell (manage.py demo): the platform operator's critical floor waiver"):
        tool.save()
    return True


def _orders(tenant: Tenant) -> None:
    for suffix, amount in POLICY_ORDERS:
        Order.objects.update_or_create(
            tenant=tenant, order_id=order_id(tenant.slug, suffix),
            defaults={"status": Order.Status.PAID, "amount": Decimal(amount), "customer_name": "Sun Li",
                      "customer_phone": "13200006666", "shipping_address": "Wuhan Jianghan District, Jiefang Avenue 8",
                      "items": [{"sku": "SKU-20001", "name": "Office chair", "quantity": 4}]})


def policy_setup(admins: dict[str, User]) -> Bundles:
    """Write the operator's waiver (once), apply each demo tenant's bundle as its administrator
    (`admins`: tenant slug -> the administrator; an identical bundle stores nothing), create the
    policy orders and forget the limits' history of earlier runs (the demo replays on one database).
    Returns Bundles. Raises BundleInvalid when a bundle file no longer validates."""
    waived = _waive()
    applied = {}
    entries = catalog()
    for slug, admin in admins.items():
        applied[slug] = bundle_apply(tenant_id=admin.tenant_id, text=BUNDLES[slug].read_bytes(), catalog=entries,
                                     actor=admin, comment="manage.py demo")
    acme = Tenant.objects.get(slug="acme")
    _orders(acme)
    LimitUsage.objects.filter(tenant__slug__in=list(admins)).delete()
    return Bundles(waived=waived, applied=applied)
