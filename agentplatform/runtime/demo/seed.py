"""Demo data: two tenants, their people, stock and orders, and the grants that tie them to tools.

Idempotent: running it twice leaves one copy. Personas (per tenant): `<t>-requester` (inventory and
order permissions, use_tool on all four tools), `<t>-nobody` (no permissions), `<t>-approver1` and
`<t>-approver2` (approve_tool on cancel_order and refund_order, via the approvers group, a group of
that tenant), `<t>-admin` and `<t>-admin2` (tenant administrators: staff, not superuser, holding the catalog
permissions they may delegate; two, so one can approve the other's control changes), `<t>-integration`
(a service account: no password sign-in, use_tool on the read-only tools only, never an approver;
docs/roles.md "Service accounts"), `<t>-auditor` (read-only: the audit trail, via `<t>-auditors`,
agentplatform.runtime.demo.auditors). One platform operator, PLATFORM_OPERATOR (superuser, no tenant). Roles:
docs/roles.md. Password of every demo user: DEMO_PASSWORD. Every demo user has the address
`<username>@example.com` (a reserved domain: no mail reaches anyone).

A second seed keeps what an administrator changed since (tools disabled globally or for a tenant,
tightened overrides, revoked grants, deactivated members): the control plane is written only when it
is missing. `seed_demo(reset=True)` (`manage.py demo --reset`) puts it back as seeded;
`demo_changes()` lists what differs (docs/operations.md, "The demo").
"""
from __future__ import annotations

from decimal import Decimal

from django.contrib.auth.models import Group, Permission
from django.db import transaction
from guardian.shortcuts import assign_perm, get_perms

from agentplatform.runtime.demo.auditors import auditor_changes, seed_auditor, strip_user
from agentplatform.tenancy.models import Tenant, TenantGroup, User
from agentplatform.tenancy.services import tenant_group_create
from tools.catalog.models import Cancellation, Order, Refund, StockLevel
from tools.registry import registry
from tools.models import IdempotencyRecord, TenantToolPolicy, Tool
from tools.services import tools_sync_registry

DEMO_PASSWORD = "demo-pass-123"
PLATFORM_OPERATOR = "platform-operator"
EMAIL_DOMAIN = "example.com"
CATALOG_PERMISSIONS = ["view_stocklevel", "view_order", "cancel_order", "refund_order"]
APPROVED_TOOLS = ("cancel_order", "refund_order")
SERVICE_ACCOUNT_PERMISSIONS = ["view_stocklevel", "view_order"]  # what the read-only tools need
TENANTS = {"acme": "ACME Retail / 艾克米零售", "globex": "Globex Trading / 环球贸易"}
ORDERS = [  # suffix, status, amount, name, phone, address
    ("0001", Order.Status.PAID, "199.00", "Li Lei", "13812345678", "Hangzhou Xihu District, Wensan Road 90"),
    ("0002", Order.Status.SHIPPED, "88.50", "Han Meimei", "13987654321", "Shanghai Pudong, Century Avenue 100"),
    ("0003", Order.Status.PAID, "560.00", "Zhang Wei", "13700001111", "Beijing Haidian, Zhongguancun Street 1"),
    ("0004", Order.Status.COMPLETED, "42.00", "Wang Fang", "13600002222", "Shenzhen Nanshan, Keyuan Road 8"),
    # Left fresh by the story (TRY_ORDERS): what the chat's suggestions name after `make demo`.
    ("0005", Order.Status.PAID, "129.00", "Chen Jing", "13511113333", "Suzhou Gusu District, Renmin Road 12"),
    ("0006", Order.Status.PAID, "318.00", "Liu Yang", "13422224444", "Nanjing Gulou District, Zhongshan Road 66"),
    ("0007", Order.Status.PAID, "76.00", "Zhao Min", "13333335555", "Chengdu Jinjiang District, Chunxi Road 3"),
]
ORDER_ITEMS = {  # suffix -> order lines shown to approvers
    "0001": [{"sku": "SKU-10001", "name": "Desk lamp", "quantity": 1}],
    "0002": [{"sku": "SKU-10002", "name": "Notebook", "quantity": 3}],
    "0003": [{"sku": "SKU-20001", "name": "Office chair", "quantity": 2}],
    "0004": [{"sku": "SKU-10001", "name": "Desk lamp", "quantity": 1}],
    "0005": [{"sku": "SKU-10002", "name": "Notebook", "quantity": 5}],
    "0006": [{"sku": "SKU-20001", "name": "Office chair", "quantity": 1}],
    "0007": [{"sku": "SKU-10001", "name": "Desk lamp", "quantity": 2}],
}
STORY_ORDERS = ("0001", "0002", "0003")  # what `manage.py demo` plays with
TRY_ORDERS = {"cancel": "0005", "refund": "0006", "cancel_zh": "0007"}  # never touched by the story
STOCK = [("SKU-10001", "WH-HZ-01", 120, 5), ("SKU-10001", "WH-SH-02", 30, 0), ("SKU-10002", "WH-HZ-01", 0, 2),
         ("SKU-20001", "WH-SH-02", 75, 10)]


# The platform operator's waiver `manage.py demo` writes on refund_order (agentplatform.runtime.demo.policy):
# the registry gate becomes the requester's confirmation and each tenant's policy bundle decides.
WAIVER = ("Demo: refunds are gated by each tenant's policy bundle (acme: rules on the amount and a "
          "limit per order; globex: two approvers for every refund).")
WAIVED = {"risk_override": "HIGH", "policy_override": "REQUESTER", "quorum": None}


def is_demo_waiver(tool: Tool) -> bool:
    """Whether `tool`'s global overrides are exactly the demo's waiver (not an administrator's change)."""
    return (tool.name == "refund_order" and tool.critical_floor_waiver == WAIVER
            and all(getattr(tool, k) == v for k, v in WAIVED.items()) and not tool.ttl_seconds)


def order_id(tenant_slug: str, suffix: str) -> str:
    """Demo order ids: acme A20260729xxxx, globex A20260730xxxx (both match A + 12 digits)."""
    return ("A20260729" if tenant_slug == "acme" else "A20260730") + suffix


def _user(tenant: Tenant | None, name: str, *, reset: bool = False, **flags) -> tuple[User, bool]:
    """The persona `<tenant>-<name>` (or `name` without a tenant) and whether it was just created.
    An existing account keeps its state, except the role flags of an older demo database; with
    `reset` it is active again."""
    username = f"{tenant.slug}-{name}" if tenant is not None else name
    # an address at the reserved example.com domain: notifications go to the console backend in the demo
    user, created = User.objects.get_or_create(
        username=username, defaults={"tenant": tenant, "email": f"{username}@{EMAIL_DOMAIN}", **flags})
    if created:
        user.set_password(DEMO_PASSWORD)
        user.save()
        return user, True
    if reset:
        flags = {**flags, "is_active": True}
    if any(getattr(user, k) != v for k, v in flags.items()):  # an older demo database: set the role
        for key, value in flags.items():
            setattr(user, key, value)
        user.save()
    return user, False


def platform_operator() -> User:
    """The demo's platform operator (superuser, no tenant), created if missing."""
    return _user(None, PLATFORM_OPERATOR, is_staff=True, is_superuser=True)[0]


def _reset_tool(tool: Tool) -> None:
    """The global row as seeded: enabled, no overrides (only with reset)."""
    seeded = {"enabled": True, "risk_override": "", "policy_override": "", "quorum": None, "ttl_seconds": None,
              "critical_floor_waiver": ""}
    if any(getattr(tool, k) != v for k, v in seeded.items()):
        for key, value in seeded.items():
            setattr(tool, key, value)
        tool.save()


def _whitelist(tenant: Tenant, tools: dict[str, Tool], *, reset: bool) -> set[str]:
    """Each tool enabled for `tenant` when the tenant has no entry for it yet (or, with `reset`, back
    to enabled without overrides). Returns the names of the entries just created."""
    created_for = set()
    for name, tool in tools.items():
        policy, created = TenantToolPolicy.objects.get_or_create(tenant=tenant, tool=tool, defaults={"enabled": True})
        if created:
            created_for.add(name)
        elif reset and (not policy.enabled or policy.risk_override or policy.quorum or policy.ttl_seconds):
            policy.enabled, policy.risk_override, policy.quorum, policy.ttl_seconds = True, "", None, None
            policy.save()
    return created_for


@transaction.atomic
def seed_demo(*, reset: bool = False) -> dict[str, dict[str, User]]:
    """Create the demo tenants, users, grants, stock and orders that are missing, and keep the rest.

    What an administrator changed (a tool disabled globally or for a tenant, an override, a revoked
    grant or permission, a member deactivated or moved out of the approvers) is kept unless
    `reset` is true, which restores the seeded control plane: tools enabled without overrides,
    every tenant's whitelist, the personas' permissions, grants and group memberships (and
    `<t>-nobody` stripped of any). Business data (stock, orders) is only created when missing.
    Returns {tenant slug: {persona: user}}.
    """
    tools = {t.name: t for t in tools_sync_registry()}
    if reset:
        for tool in tools.values():
            _reset_tool(tool)
    catalog = list(Permission.objects.filter(content_type__app_label="catalog", codename__in=CATALOG_PERMISSIONS))
    people: dict[str, dict[str, User]] = {}
    for slug, name in TENANTS.items():
        tenant, _ = Tenant.objects.get_or_create(slug=slug, defaults={"name": name})
        new_entries = _whitelist(tenant, tools, reset=reset)
        requester, new_requester = _user(tenant, "requester", reset=reset)
        if new_requester or reset:
            requester.user_permissions.add(*catalog)
        for tool_name, tool in tools.items():
            if new_requester or reset or tool_name in new_entries:
                assign_perm("tools.use_tool", requester, tool)
        approvers = Group.objects.filter(name=f"{slug}-approvers").first()
        new_group = approvers is None
        if new_group:  # audited in this tenant's trail only (not every tenant's)
            approvers = tenant_group_create(name=f"{slug}-approvers", tenant_id=tenant.pk)
        TenantGroup.objects.get_or_create(group=approvers, defaults={"tenant": tenant})
        for tool_name in APPROVED_TOOLS:
            if new_group or reset or tool_name in new_entries:
                assign_perm("tools.approve_tool", approvers, tools[tool_name])
        approver1, new1 = _user(tenant, "approver1", reset=reset)
        approver2, new2 = _user(tenant, "approver2", reset=reset)
        for approver, new in ((approver1, new1), (approver2, new2)):
            if new or reset:
                approver.groups.add(approvers)
        nobody, _ = _user(tenant, "nobody", reset=reset)
        if reset:
            strip_user(nobody, tools.values())
        admins = {}
        # Two tenant administrators: a change that empowers an approver needs a second one
        # (dual control, docs/roles.md "Trust model").
        for persona in ("admin", "admin2"):
            admin_user, new_admin = _user(tenant, persona, reset=reset, is_staff=True, is_superuser=False)
            if new_admin or reset:  # what this administrator may delegate, and the audit trail's API and export
                admin_user.user_permissions.add(
                    *catalog, Permission.objects.get(content_type__app_label="audit", codename="export_auditevent"))
            admins[persona] = admin_user
        integration = _service_account(tenant, tools, catalog, reset=reset)
        people[slug] = {"requester": requester, "nobody": nobody, "approver1": approver1, "approver2": approver2,
                        **admins, "integration": integration,
                        "auditor": seed_auditor(tenant, reset=reset, make_user=_user)}
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


def _service_account(tenant: Tenant, tools: dict[str, Tool], catalog: list[Permission], *, reset: bool) -> User:
    """`<tenant>-integration`, a service account (unusable password) with use_tool on the read-only
    tools and the catalog permissions they need; created if missing, its grants put back with `reset`."""
    username = f"{tenant.slug}-integration"
    user = User.objects.filter(username=username).first()
    created = user is None
    if created:
        user = User(username=username, tenant=tenant, email=f"{username}@{EMAIL_DOMAIN}", is_service_account=True)
        user.set_unusable_password()
        user.save()
    elif reset and not user.is_active:
        user.is_active = True
        user.save()
    if created or reset:
        user.user_permissions.add(*[p for p in catalog if p.codename in SERVICE_ACCOUNT_PERMISSIONS])
        for tool in tools.values():
            spec = registry.get(tool.name)
            if spec is not None and spec.read_only:
                assign_perm("tools.use_tool", user, tool)
    return user


def demo_changes() -> list[str]:
    """What differs from the seeded control plane, one English sentence each (empty when nothing
    does): tools disabled or overridden globally or for a demo tenant, grants, permissions and
    memberships the personas lost, personas deactivated, `<t>-nobody` given anything. Reads only."""
    changes: list[str] = []
    # The seed's tools are the local ones; remote (MCP) tools are discovered disabled by design and
    # enabled by review (the demo's step 13), which is not a change to the seed.
    tools = {t.name: t for t in Tool.objects.filter(registered=True, source="local").order_by("name")}
    for tool in tools.values():
        if not tool.enabled:
            changes.append(f"tool {tool.name} is disabled for every tenant")
        # the demo's own waiver (agentplatform.runtime.demo.policy) is part of the story, not a change
        if (tool.risk_override or tool.policy_override or tool.quorum or tool.ttl_seconds) and not is_demo_waiver(tool):
            changes.append(f"tool {tool.name} has global overrides")
    catalog = {f"catalog.{c}" for c in CATALOG_PERMISSIONS}
    for tenant in Tenant.objects.filter(slug__in=TENANTS).order_by("slug"):
        for policy in TenantToolPolicy.objects.filter(tenant=tenant, tool__in=tools.values()).select_related("tool"):
            if not policy.enabled:
                changes.append(f"{policy.tool.name} is disabled for {tenant.slug}")
            elif policy.risk_override or policy.quorum or policy.ttl_seconds:
                changes.append(f"{policy.tool.name} is tightened for {tenant.slug}")
        users = {u.username: u for u in User.objects.filter(tenant=tenant, username__startswith=f"{tenant.slug}-")}
        for persona in ("requester", "approver1", "approver2", "nobody", "admin", "admin2"):
            user = users.get(f"{tenant.slug}-{persona}")
            if user is not None and not user.is_active:
                changes.append(f"{user.username} is deactivated")
        requester = users.get(f"{tenant.slug}-requester")
        if requester is not None:
            missing = sorted(catalog - requester.get_all_permissions())
            if missing:
                changes.append(f"{requester.username} lacks {', '.join(missing)}")
            lost = [n for n, t in tools.items() if "use_tool" not in get_perms(requester, t)]
            if lost:
                changes.append(f"{requester.username} lacks use_tool on {', '.join(lost)}")
        for persona in ("approver1", "approver2"):
            user = users.get(f"{tenant.slug}-{persona}")
            if user is not None:
                lost = [n for n in APPROVED_TOOLS if n in tools and not user.has_perm("tools.approve_tool", tools[n])]
                if lost:
                    changes.append(f"{user.username} may no longer approve {', '.join(lost)}")
        nobody = users.get(f"{tenant.slug}-nobody")
        if nobody is not None and (nobody.get_all_permissions() or any(get_perms(nobody, t) for t in tools.values())):
            changes.append(f"{nobody.username} was given permissions")
        changes += auditor_changes(tenant)
    return changes


def reset_demo_orders() -> None:
    """Put the demo orders back in their seeded state so `demo` can be replayed on the same
    database: their cancellations, refunds and idempotency records go, their status returns."""
    Cancellation.objects.all().delete()
    Refund.objects.all().delete()
    IdempotencyRecord.objects.all().delete()
    for slug in TENANTS:
        for suffix, status, *_ in ORDERS:
            Order.objects.filter(tenant__slug=slug, order_id=order_id(slug, suffix)).update(status=status)
