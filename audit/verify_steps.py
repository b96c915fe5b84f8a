"""The chain check (audit.chain) in bounded steps, for a page that verifies a long trail while
showing progress: each step checks at most `limit` rows after a position the caller names and
says where to continue, so no request holds a cursor or runs longer than one batch.

A step trusts nothing the caller sends but the position: the previous row's hash is read from the
database and that row was itself checked by the step before (or is checked again when the caller
starts elsewhere). The last step also compares the chain head and looks for rows inserted around
the chain (without a position), as `manage.py audit_verify` does.
"""
from __future__ import annotations

from dataclasses import dataclass

from audit.chain import online_chain_start
from audit.models import AuditChainHead, AuditEvent
from audit.verify import ChainStart, verify_chain

STEP_ROWS = 2000


@dataclass(frozen=True)
class StepReport:
    """One step. checked_through: the last chain position that holds (the `after` of the next
    step). head_seq / head_hash: the tenant's chain head. done: nothing left to check (or a
    fault was found). problem: the first fault, naming the row (chain_seq and id), "" when none.
    bad_seq: that row's chain position (None when the fault names none)."""

    checked_through: int
    head_seq: int
    head_hash: str
    done: bool
    problem: str = ""
    bad_seq: int | None = None

    @property
    def ok(self) -> bool:
        """No fault so far."""
        return not self.problem


def head_seq(*, tenant_id: int) -> int:
    """The tenant's chain head position (0 for an empty trail); one query."""
    return AuditChainHead.objects.filter(tenant_id=tenant_id).values_list("seq", flat=True).first() or 0


def verify_step(*, tenant_id: int, after: int = 0, limit: int = STEP_ROWS) -> StepReport:
    """Check the tenant's rows with chain_seq in (after, after + limit].

    after: the last position already checked (0 to start; a position inside the archived part of
    the trail starts where the online chain starts). limit: rows per step (1..STEP_ROWS).
    Returns a StepReport; never raises for a broken chain (it reports it).
    """
    limit = max(1, min(limit, STEP_ROWS))
    after = max(0, after)
    head = {"seq": 0, "hash": ""}  # read with the rows below, or alone when no row is read

    def report(through: int, done: bool, problem: str = "", bad: int | None = None) -> StepReport:
        return StepReport(through, head["seq"], head["hash"], done or bool(problem), problem, bad)

    # After a retention cut the online chain starts past the newest archive (its file holds the rest).
    first, prev_hash = online_chain_start(tenant_id)
    after = max(after, first - 1)
    if after > first - 1:
        prev_hash = AuditEvent.objects.filter(tenant_id=tenant_id, chain_seq=after).values_list(
            "row_hash", flat=True).first()
        if prev_hash is None:
            head = AuditChainHead.objects.filter(tenant_id=tenant_id).values("seq", "hash").first() or head
            return report(after, True, f"row chain_seq={after} is missing: deleted", after)
    # The fast verifier (audit.verify: one snapshot, PostgreSQL builds the canonical members, the
    # same faults in the same words; SQLite takes the reference path), from this step's start.
    verdict = verify_chain(_Tenant(tenant_id), start=ChainStart(seq=after, prev_hash=prev_hash), limit=limit)
    head = {"seq": verdict.head_seq, "hash": verdict.head_hash}
    if verdict.ok:
        return report(verdict.last_seq, verdict.complete)
    bad = None if "has no chain position" in verdict.problem else verdict.last_seq + 1
    return report(verdict.last_seq, True, verdict.problem, bad)


@dataclass(frozen=True)
class _Tenant:
    """What verify_chain reads of a tenant: its pk (and a slug it only echoes)."""

    pk: int
    slug: str = ""
