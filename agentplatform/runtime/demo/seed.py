"""Demo data: two tenants, their people, stock and orders, and the grants that tie them to tools.

Idempotent: running it twice leaves one copy. Personas (per tenant): `<t>-requester` (inventory and
order permissions, use_tool on all four tools), `<t>-nobody` (no permissions), `<t>-approver1` and
`<t>-approver2` (approve_tool on cancel_order and refund_order, via the approvers group, a group of
that tenant), `<t>-admin` (tenant administrator: staff, not superuser, holding the catalog permissions
they may delegate). One platform operator, PLATFORM_OPERATOR (superuser, no tenant). Roles:
docs/roles.md. Password of every demo user: DEMO_PASSWORD.
"""
from __future__ import annotations

from decimal import Decimal

from django.contrib.auth.models import Group, Permission
from django.db import transaction
from guardian.shortcuts import assign_perm

from agentplatform.tenancy.models import Tenant, TenantGroup, User
from tools.catalog.models import Order, StockLevel
from tools.services import tenant_tool_set_enabled, tools_sync_registry

DEMO_PASSWORD = "demo-pass-123"
PLATFORM_OPERATOR = "platform-operator"
CATALOG_PERMISSIONS = ["view_stocklevel", "view_order", "cancel_order", "refund_order"]
TENANTS = {"acme": "ACME Retail / 艾克米零售", "globex": "Globex Trading / 环球贸易"}
ORDERS = [  # suffix, status, amount, name, phone, address
    ("0001", Order.Status.PAID, "199.00", "Li Lei", "13812345678", "Hangzhou Xihu District, Wensan Road 90"),
    ("0002", Order.Status.SHIPPED, "88.50", "Han Meimei", "13987654321", "Shanghai Pudong, Century Avenue 100"),
    ("0003", Order.Status.PAID, "560.00", "Zhang Wei", "13700001111", "Beijing Haidian, Zhongguancun Street 1"),
    ("0004", Order.Status.COMPLETED, "42.00", "Wang Fang", "13600002222", "Shenzhen Nanshan, Keyuan Road 8"),
]
ORDER_ITEMS = {  # suffix -> order lines shown to approvers of a cancellation (issue 13 item 1)
    "0001": [{"sku": "SKU-10001", "name": "Desk lamp", "quantity": 1}],
    "0002": [{"sku": "SKU-10002", "name": "Notebook", "quantity": 3}],
    "0003": [{"sku": "SKU-20001", "name": "Office chair", "quantity": 2}],
    "0004": [{"sku": "SKU-10001", "name": "Desk lamp", "quantity": 1}],
}
STOCK = [("SKU-10001", "WH-HZ-01", 120, 5), ("SKU-10001", "WH-SH-02", 30, 0), ("SKU-10002", "WH-HZ-01", 0, 2),
         ("SKU-20001", "WH-SH-02", 75, 10)]


def order_id(tenant_slug: str, suffix: str) -> str:
    """Demo order ids: acme A20260729xxxx, globex A20260730xxxx (both match A + 12 digits)."""
    return ("A20260729" if tenant_slug == "acme" else "A20260730") + suffix


def _user(tenant: Tenant | None, name: str, **flags) -> User:
    username = f"{tenant.slug}-{name}" if tenant is not None else name
    # an address at the reserved example.com domain: notifications go to the console backend in the demo
    user, created = User.objects.get_or_create(username=username, defaults={
        "tenant": tenant, "email": f"{username}@example.com", **flags})
    if created:
        user.set_password(DEMO_PASSWORD)
        user.save()
    elif any(getattr(user, k) != v for k, v in flags.items()):  # an older demo database: set the role
        for key, value in flags.items():
            setattr(user, key, value)
        user.save()
    return user


def platform_operator() -> User:
    """The demo's platform operator (superuser, no tenant), created if missing."""
    return _user(None, PLATFORM_OPERATOR, is_staff=True, is_superuser=True)


@transaction.atomic
def seed_demo() -> dict[str, dict[str, User]]:
    """Create (or keep) the demo tenants, users, grants, stock and orders. Returns {tenant: {persona: user}}."""
    tools = {t.name: t for t in tools_sync_registry()}
    people: dict[str, dict[str, User]] = {}
    for slug, name in TENANTS.items():
        tenant, _ = Tenant.objects.get_or_create(slug=slug, defaults={"name": name})
        for tool_name in tools:
            tenant_tool_set_enabled(tenant_id=tenant.pk, tool_name=tool_name, enabled=True)
        requester = _user(tenant, "requester")
        catalog = Permission.objects.filter(content_type__app_label="catalog", codename__in=CATALOG_PERMISSIONS)
        requester.user_permissions.add(*catalog)
        for tool in tools.values():
            assign_perm("tools.use_tool", requester, tool)
        approvers, _ = Group.objects.get_or_create(name=f"{slug}-approvers")
        TenantGroup.objects.get_or_create(group=approvers, defaults={"tenant": tenant})
        for tool_name in ("cancel_order", "refund_order"):
            assign_perm("tools.approve_tool", approvers, tools[tool_name])
        approver1, approver2 = _user(tenant, "approver1"), _user(tenant, "approver2")
        approver1.groups.add(approvers)
        approver2.groups.add(approvers)
        people[slug] = {
            "requester": requester,
            "nobody": _user(tenant, "nobody"),
            "approver1": approver1,
            "approver2": approver2,
            "admin": _user(tenant, "admin", is_staff=True, is_superuser=False),
        }
        # what this tenant administrator may delegate, and the audit trail's API and export
        people[slug]["admin"].user_permissions.add(
            *catalog, Permission.objects.get(content_type__app_label="audit", codename="export_auditevent"))
        for sku, warehouse, available, locked in STOCK:
            StockLevel.objects.get_or_create(
                tenant=tenant, sku=sku, warehouse_code=warehouse,
                defaults={"available_quantity": available + (7 if slug == "globex" else 0), "locked_quantity": locked,
                          "cost_price": Decimal("12.34"), "supplier_floor_price": Decimal("10.00")})
        for suffix, status, amount, customer, phone, address in ORDERS:
            Order.objects.get_or_create(
                tenant=tenant, order_id=order_id(slug, suffix),
                defaults={"status": status, "amount": Decimal(amount), "customer_name": customer,
                          "customer_phone": phone, "shipping_address": address,
                          "items": ORDER_ITEMS.get(suffix, [])})
    platform_operator()  # after the tenants: its creation is recorded in every tenant's trail
    return people


def reset_demo_orders() -> None:
    """Put the demo orders back in their seeded state so `demo` can be replayed on the same database."""
    from tools.catalog.models import Cancellation, Refund
    from tools.models import IdempotencyRecord

    Cancellation.objects.all().delete()
    Refund.objects.all().delete()
    IdempotencyRecord.objects.all().delete()
    for slug in TENANTS:
        for suffix, status, *_ in ORDERS:
            Order.objects.filter(tenant__slug=slug, order_id=order_id(slug, suffix)).update(status=status)


