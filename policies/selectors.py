"""Reads of policy bundles: the bundle in force for a tenant, compiled and cached per version."""
from __future__ import annotations

import threading
from collections import OrderedDict

import functools
import uuid

from django.db import connection

from policies.compiler import Compiled, compile_stored
from policies.kill_switch import ActiveStop
from policies.models import KillSwitch, PolicyBundle

_CACHE: OrderedDict[tuple[int, int, int, str], Compiled] = OrderedDict()
_CACHE_SIZE = 256
_LOCK = threading.Lock()


def bundle_version(tenant_id: int) -> dict | None:
    """{"id", "version", "digest"} of the tenant's bundle in force (its highest version), or None.
    One query."""
    return PolicyBundle.objects.filter(tenant_id=tenant_id).order_by("-version") \
        .values("id", "version", "digest").first()


@functools.cache
def _state_sql() -> str:
    bundles, stops = PolicyBundle._meta.db_table, KillSwitch._meta.db_table
    return (
        f"SELECT * FROM (SELECT 'b', CAST(id AS TEXT), version, digest, CAST(NULL AS INTEGER), CAST(NULL AS TEXT) FROM {bundles} "
        f"WHERE tenant_id = %s ORDER BY version DESC LIMIT 1) AS b "
        f"UNION ALL SELECT * FROM (SELECT 'k', CAST(id AS TEXT), CAST(NULL AS INTEGER), CAST(NULL AS TEXT), tenant_id, reason FROM {stops} "
        f"WHERE tool_name = %s AND released_at IS NULL AND (tenant_id IS NULL OR tenant_id = %s) LIMIT 1) AS k")


def gate_state(tenant_id: int, tool_name: str) -> tuple[Compiled | None, ActiveStop | None]:
    """What a call's gate reads, in one round trip: the tenant's bundle in force (compiled, cached
    per version as `bundle_in_force`) and the kill switch in force for `tool_name` in the tenant or
    everywhere (policies.kill_switch.active_stop). Returns (Compiled | None, ActiveStop | None)."""
    with connection.cursor() as cursor:
        cursor.execute(_state_sql(), [tenant_id, tool_name, tenant_id])
        rows = cursor.fetchall()
    head, stop = None, None
    for kind, pk, version, digest, stop_tenant, reason in rows:
        if kind == "b":
            head = {"id": int(pk), "version": version, "digest": digest}
        else:
            stop = ActiveStop(id=uuid.UUID(pk), tool_name=tool_name, tenant_id=stop_tenant, reason=reason)
    return (_compiled(tenant_id, head) if head else None), stop


def bundle_in_force(tenant_id: int) -> Compiled | None:
    """The tenant's bundle in force, compiled (policies.compiler), or None when it has none.
    One query; the row is read and compiled once per version per process (an applied version is
    never changed; the key holds its row id and digest too, so a row id reused after a rollback
    never answers from another bundle)."""
    head = bundle_version(tenant_id)
    return _compiled(tenant_id, head) if head is not None else None


def _compiled(tenant_id: int, head: dict) -> Compiled:
    key = (tenant_id, head["version"], head["id"], head["digest"])
    with _LOCK:
        compiled = _CACHE.get(key)
        if compiled is not None:
            _CACHE.move_to_end(key)
            return compiled
    row = PolicyBundle.objects.only("cedar", "limits", "version").get(pk=head["id"])
    compiled = compile_stored(version=row.version, cedar=row.cedar, limits=row.limits)
    with _LOCK:
        _CACHE[key] = compiled
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return compiled
