"""The reference verification of a tenant's audit hash chain (audit.chain): every row read through
the ORM from the first online row, each link recomputed by `audit.chain.body_digest` and
`link_hash`. Slow (about 0.1 ms a row) and simple: `audit.verify.verify_chain` is the fast path
`audit_verify` runs, and re-checks through `audit.chain.body_digest` any row it would report; the
tests and benches compare the two.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

from django.apps import apps
from django.db.models import Q

from audit.chain import body_digest, link_hash, online_chain_start


@dataclass(frozen=True)
class ChainReport:
    """The result of verifying one tenant's chain.

    ok: every link holds and the head matches the last row. rows: events checked. head_seq /
    head_hash: the tenant's head (what to anchor outside the database). problem: the first fault,
    naming the row (chain_seq and id), or "" when ok.
    """

    tenant_slug: str
    ok: bool
    rows: int
    head_seq: int
    head_hash: str
    problem: str = ""


def _rows(tenant_id: int, *, from_seq: int = 1) -> Iterator[dict[str, Any]]:
    AuditEvent = apps.get_model("audit", "AuditEvent")
    names = [f.attname for f in AuditEvent._meta.concrete_fields]
    # Chained rows by chain_seq; rows without one (written around the chain) come last.
    online = Q(chain_seq__gte=from_seq) | Q(chain_seq__isnull=True)
    query = AuditEvent.objects.filter(online, tenant_id=tenant_id).order_by("chain_seq", "id").values(*names)
    yield from query.iterator(chunk_size=2000)


def verify_tenant(tenant) -> ChainReport:
    """Recompute the chain of `tenant` (a Tenant) from its first online event; stop at the first fault.

    The chain starts at `online_chain_start`: row 1 linking to nothing, or after a retention cut
    the row after the newest archive, which must link to that archive's last hash.

    Faults, in the order they are checked for each row: a row without a chain position (inserted
    around the chain), a gap in chain_seq (rows deleted), a prev_hash that is not the previous row's
    hash (rows reordered or inserted), a hash that does not match the row's content (row edited);
    after the last row, a head ahead of it (the newest rows deleted). Returns a ChainReport.
    """
    head = apps.get_model("audit", "AuditChainHead").objects.filter(tenant_id=tenant.pk).values("seq", "hash").first() or {"seq": 0, "hash": ""}
    expected_seq, prev_hash = online_chain_start(tenant.pk)
    count = 0

    def report(problem: str = "") -> ChainReport:
        return ChainReport(tenant.slug, not problem, count, head["seq"], head["hash"], problem)

    for row in _rows(tenant.pk, from_seq=expected_seq):
        seq, name = row["chain_seq"], f"row id={row['id']}"
        if seq is None:
            return report(f"{name} has no chain position: it was inserted around the chain")
        name = f"row chain_seq={seq} id={row['id']}"
        if seq != expected_seq:
            if seq > expected_seq:
                return report(f"missing row(s) chain_seq={expected_seq}..{seq - 1} before {name}: deleted")
            return report(f"{name} repeats a chain position: inserted or reordered")
        if row["prev_hash"] != prev_hash:
            return report(f"{name} does not link to chain_seq={seq - 1}: rows reordered, replaced or inserted")
        if link_hash(prev_hash, seq, body_digest(row)) != row["row_hash"]:
            return report(f"{name} does not match its hash: the row was edited")
        prev_hash, expected_seq, count = row["row_hash"], seq + 1, count + 1
    if head["seq"] != expected_seq - 1 or head["hash"] != prev_hash:
        return report(f"the chain head is at chain_seq={head['seq']} but the last row is chain_seq={expected_seq - 1}: "
                      f"the newest row(s) were deleted or the head was altered")
    return report()
