"""Reads of policy bundles: the bundle in force for a tenant, compiled and cached per version."""
from __future__ import annotations

import threading
from collections import OrderedDict

from policies.compiler import Compiled, compile_stored
from policies.models import PolicyBundle

_CACHE: OrderedDict[tuple[int, int, int, str], Compiled] = OrderedDict()
_CACHE_SIZE = 256
_LOCK = threading.Lock()


def bundle_version(tenant_id: int) -> dict | None:
    """{"id", "version", "digest"} of the tenant's bundle in force (its highest version), or None.
    One query."""
    return PolicyBundle.objects.filter(tenant_id=tenant_id).order_by("-version") \
        .values("id", "version", "digest").first()


def bundle_in_force(tenant_id: int) -> Compiled | None:
    """The tenant's bundle in force, compiled (policies.compiler), or None when it has none.
    One query; the row is read and compiled once per version per process (an applied version is
    never changed; the key holds its row id and digest too, so a row id reused after a rollback
    never answers from another bundle)."""
    head = bundle_version(tenant_id)
    if head is None:
        return None
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
