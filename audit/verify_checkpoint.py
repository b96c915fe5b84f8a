"""Incremental verification of a tenant's audit chain: a sealed checkpoint per tenant and the run
that starts from it (docs/audit.md, "Incremental verification").

`chain_verify(tenant=..., full=False)` re-derives the tenant's checkpoint (its seal, and the row at
its seq: still there, still carrying the recorded hash, and that hash still the row's own link),
then verifies only the rows after it (audit.verify.verify_chain). `full=True` verifies from the
first row and, when a sealed checkpoint exists, also requires the row at its seq to still carry
the recorded hash (a chain rewritten consistently from before the checkpoint verifies link by
link, but no longer has that hash there). The checkpoint advances only when the run is ok.

The seal is HMAC-SHA256 over (tenant id, seq, row_hash, verified_at) with a key derived from
SECRET_KEY (Django's salted_hmac; SECRET_KEY_FALLBACKS are accepted, so a key rotation does not
refuse every checkpoint). Who can write the table without the key cannot forge or move one; who
holds the key can.
"""
from __future__ import annotations

import datetime
import hmac
import logging
import time

from django.apps import apps
from django.conf import settings
from django.db import DatabaseError, IntegrityError, transaction
from django.utils import timezone
from django.utils.crypto import salted_hmac

from audit import metrics
from audit.chain import body_digest, link_hash, online_chain_start
from audit.models import AuditChainHead, AuditEvent, AuditVerifyCheckpoint
from audit.verify import ChainStart, ChainVerdict
from audit.verify_parallel import verify_chain_split

logger = logging.getLogger(__name__)
_SEAL_SALT = "agentplatform.audit.verify_checkpoint"


def _sealed_text(*, tenant_id: int, seq: int, row_hash: str, verified_at: datetime.datetime) -> str:
    at = verified_at.astimezone(datetime.timezone.utc).isoformat(timespec="microseconds")
    return f"{tenant_id}:{seq}:{row_hash}:{at}"


def checkpoint_seal(*, tenant_id: int, seq: int, row_hash: str, verified_at: datetime.datetime,
                    secret: str | None = None) -> str:
    """Hex HMAC-SHA256 of the checkpoint's fields under a key derived from `secret` (SECRET_KEY
    by default). verified_at: an aware datetime (sealed as UTC ISO 8601 with microseconds)."""
    return salted_hmac(_SEAL_SALT, _sealed_text(tenant_id=tenant_id, seq=seq, row_hash=row_hash,
                                                verified_at=verified_at),
                       secret=secret, algorithm="sha256").hexdigest()


def _seal_holds(checkpoint: AuditVerifyCheckpoint) -> bool:
    for secret in [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]:
        expected = checkpoint_seal(tenant_id=checkpoint.tenant_id, seq=checkpoint.seq, row_hash=checkpoint.row_hash,
                                   verified_at=checkpoint.verified_at, secret=secret)
        if hmac.compare_digest(expected, checkpoint.seal):
            return True
    return False


def _checkpoint_problem(checkpoint: AuditVerifyCheckpoint) -> str:
    """"" when the checkpoint re-derives: its seal holds, and the row at its seq still carries the
    recorded hash, which is still that row's own link. Otherwise the fault, in words."""
    where = f"the verification checkpoint at chain_seq={checkpoint.seq} (verified {checkpoint.verified_at:%Y-%m-%d %H:%M:%S} UTC)"
    if not _seal_holds(checkpoint):
        return (f"{where} does not carry a valid seal: it was forged or altered by someone without the key; "
                f"run audit_verify --full")
    names = [f.attname for f in AuditEvent._meta.concrete_fields]
    row = AuditEvent.objects.filter(tenant_id=checkpoint.tenant_id, chain_seq=checkpoint.seq).values(*names).first()
    if row is None:
        return f"{where}: its row is missing: deleted"
    name = f"row chain_seq={checkpoint.seq} id={row['id']}"
    if row["row_hash"] != checkpoint.row_hash:
        return f"{where}: {name} no longer has the hash it had then: the chain was rewritten up to it"
    if link_hash(row["prev_hash"], checkpoint.seq, body_digest(row)) != row["row_hash"]:
        return f"{name} does not match its hash: the row was edited"
    return ""


def checkpoint_advance(*, tenant_id: int, seq: int, row_hash: str) -> AuditVerifyCheckpoint | None:
    """Seal and store that the tenant's chain verified up to `seq` (whose row has `row_hash`).

    Never moves a checkpoint back: when another run already recorded a higher seq, that one is
    kept and None is returned. Returns the stored checkpoint otherwise. Its own transaction (or the
    caller's); raises DatabaseError when the write fails.
    """
    now = timezone.now()
    fields = {"seq": seq, "row_hash": row_hash, "verified_at": now,
              "seal": checkpoint_seal(tenant_id=tenant_id, seq=seq, row_hash=row_hash, verified_at=now)}
    with transaction.atomic():
        current = AuditVerifyCheckpoint.objects.select_for_update().filter(tenant_id=tenant_id).first()
        if current is None:
            try:
                with transaction.atomic():
                    return AuditVerifyCheckpoint.objects.create(tenant_id=tenant_id, **fields)
            except IntegrityError:  # another run created it meanwhile: compare with theirs
                current = AuditVerifyCheckpoint.objects.select_for_update().get(tenant_id=tenant_id)
        if current.seq > seq:
            return None
        for name, value in fields.items():
            setattr(current, name, value)
        current.save(update_fields=list(fields))
        return current


def chain_verify(*, tenant, full: bool = False, limit: int | None = None, workers: int = 1) -> ChainVerdict:
    """Verify `tenant`'s chain from its checkpoint (or from the first row when `full` or when it
    has none) and advance the checkpoint when the run is ok.

    tenant: a Tenant. limit: at most this many rows this run (None: to the end); an ok run
    stopped by it advances the checkpoint to the last row it verified. workers: processes a long
    run is split among (audit.verify_parallel; 1: this process only, as the scheduled task runs). Returns a ChainVerdict whose
    problem names the checkpoint when the checkpoint itself does not re-derive (forged seal, row
    missing, hash changed, row edited): then nothing after it is checked and `audit_verify --full`
    is the way on. Raises DatabaseError when the database cannot be read or the checkpoint stored.
    """
    checkpoint = AuditVerifyCheckpoint.objects.filter(tenant_id=tenant.pk).first()
    first_online, archived_hash = online_chain_start(tenant.pk)
    origin = ChainStart(seq=first_online - 1, prev_hash=archived_hash)
    start = origin
    if checkpoint is not None and not full and checkpoint.seq > origin.seq:
        problem = _checkpoint_problem(checkpoint)
        if problem:
            return _refused(tenant, checkpoint, problem)
        start = ChainStart(seq=checkpoint.seq, prev_hash=checkpoint.row_hash)
    # A checkpoint at or behind a retention cut: its rows left the database with their archive,
    # which `python -m audit.verify_export` checks; the online chain is checked from the cut.
    verdict = verify_chain_split(tenant, start=start, limit=limit, workers=workers)
    if not verdict.ok:
        return verdict
    if full and checkpoint is not None and checkpoint.seq > origin.seq and checkpoint.seq <= verdict.last_seq \
            and _seal_holds(checkpoint):
        recorded = AuditEvent.objects.filter(tenant_id=tenant.pk, chain_seq=checkpoint.seq).values_list(
            "row_hash", flat=True).first()
        if recorded != checkpoint.row_hash:
            return _refused(tenant, checkpoint, (
                f"the chain verifies link by link, but row chain_seq={checkpoint.seq} no longer has the hash it had "
                f"when verified at {checkpoint.verified_at:%Y-%m-%d %H:%M:%S} UTC: the chain was rewritten from "
                f"before it"), verdict=verdict)
    if verdict.last_seq > start.seq or checkpoint is None or full:
        if verdict.last_seq > 0:
            checkpoint_advance(tenant_id=tenant.pk, seq=verdict.last_seq, row_hash=verdict.last_hash)
    return verdict


def _refused(tenant, checkpoint: AuditVerifyCheckpoint, problem: str, *, verdict: ChainVerdict | None = None) -> ChainVerdict:
    head = AuditChainHead.objects.filter(tenant_id=tenant.pk).values("seq", "hash").first() or {"seq": 0, "hash": ""}
    return ChainVerdict(tenant.slug, False, verdict.rows if verdict else 0, head["seq"], head["hash"],
                        checkpoint.seq, checkpoint.seq, checkpoint.row_hash, verdict.complete if verdict else False,
                        problem)


def chains_verify(*, limit: int | None = None) -> int:
    """The scheduled run: verify every tenant's chain from its checkpoint (`chain_verify`), set the
    metrics (audit.metrics.audit_chain_verified) and log an ERROR naming the tenant and the first
    fault of each broken chain.

    limit: at most this many rows per tenant this run (AUDIT_VERIFY_MAX_ROWS_PER_RUN when None); a
    tenant further behind catches up over the next runs. A tenant whose run fails with a
    DatabaseError is logged and skipped (its metrics stay as they were). Returns how many chains
    are broken.
    """
    limit = settings.AUDIT_VERIFY_MAX_ROWS_PER_RUN if limit is None else limit
    broken = 0
    for tenant in apps.get_model("tenancy", "Tenant").objects.order_by("pk"):
        try:
            verdict = chain_verify(tenant=tenant, limit=limit)
        except DatabaseError:
            logger.exception("audit chain verification of tenant %s could not run", tenant.slug)
            continue
        metrics.audit_chain_verified(tenant_id=tenant.pk, ok=verdict.ok, verified_seq=verdict.last_seq, at=time.time())
        if not verdict.ok:
            broken += 1
            logger.error("audit chain of tenant %s is BROKEN: %s", tenant.slug, verdict.problem)
    return broken
