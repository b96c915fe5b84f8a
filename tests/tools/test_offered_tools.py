"""The offered-tools selector is a hand-written query (tools.selectors, for speed); it must offer
exactly the rows guardian's own `get_objects_for_user` grants, within the tenant's enabled policies,
minus tools whose Django permission the user lacks."""
from __future__ import annotations

from django.contrib.auth.models import Group, Permission
from guardian.shortcuts import assign_perm, get_objects_for_user, remove_perm

from agentplatform.tenancy.models import User
from tools.models import TenantToolPolicy, Tool
from tools.registry import registry
from tools.selectors import offered_tools


def _expected(user) -> set[str]:
    """What guardian, the tenant policies and Django's permissions say, composed the slow way."""
    fresh = User.objects.get(pk=user.pk)  # empty permission caches
    granted = get_objects_for_user(fresh, "tools.use_tool", klass=Tool, accept_global_perms=False)
    allowed = set(TenantToolPolicy.objects.filter(tenant_id=fresh.tenant_id, enabled=True)
                  .values_list("tool__name", flat=True))
    names = set()
    for row in granted.filter(enabled=True, registered=True):
        spec = registry.get(row.name)
        if row.name in allowed and spec and (not spec.permission or fresh.has_perm(spec.permission)):
            names.add(row.name)
    return names


def _offered(user) -> set[str]:
    return set(offered_tools(user=User.objects.get(pk=user.pk)))


def _grant_business_permissions(user) -> None:
    """The Django permissions the built-in tools need, so only `use_tool` decides what `user` gets."""
    for name in ("list_orders", "cancel_order"):
        app_label, codename = registry.get(name).permission.split(".")
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))


def test_offered_tools_match_guardian_for_direct_group_and_revoked_grants(requester, nobody, outsider):
    cancel = Tool.objects.get(name="cancel_order")
    listing = Tool.objects.get(name="list_orders")
    _grant_business_permissions(nobody)
    # the seeded grants first
    assert _offered(requester) == _expected(requester) != set()
    assert _offered(nobody) == _expected(nobody)
    assert _offered(outsider) == _expected(outsider) != set()

    # a direct grant to a user who had none
    assign_perm("tools.use_tool", nobody, listing)
    assert _offered(nobody) == _expected(nobody) == {"list_orders"}

    # a grant through a group only
    group = Group.objects.create(name="test-listers")
    assign_perm("tools.use_tool", group, cancel)
    nobody.groups.add(group)
    assert _offered(nobody) == _expected(nobody) == {"list_orders", "cancel_order"}

    # revoked directly, still held through no group: gone
    remove_perm("tools.use_tool", nobody, listing)
    assert _offered(nobody) == _expected(nobody) == {"cancel_order"}

    # a tool disabled for the tenant, and one disabled globally
    TenantToolPolicy.objects.filter(tenant_id=requester.tenant_id, tool=cancel).update(enabled=False)
    Tool.objects.filter(pk=listing.pk).update(enabled=False)
    offered = _offered(requester)
    assert "cancel_order" not in offered and "list_orders" not in offered
    assert offered == _expected(requester)
    # the other tenant is not affected by acme's tenant policy
    assert "cancel_order" in _offered(outsider)
    assert _offered(outsider) == _expected(outsider)


def test_a_grant_on_one_tool_offers_that_tool_only(requester, nobody):
    # guardian stores object_pk as text; the query compares it with the row id cast to text
    _grant_business_permissions(nobody)
    first = Tool.objects.get(name="list_orders")
    assign_perm("tools.use_tool", nobody, first)
    assert _offered(nobody) == _expected(nobody) == {"list_orders"}
