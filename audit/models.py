"""Append-only audit events: one row per decision on a tool call, confirmation, approval or control change.

The application never updates or deletes a row: `save()` on an existing row, `delete()`
and queryset `update()`/`delete()` raise AuditImmutable. On PostgreSQL a trigger
(migration 0003) refuses UPDATE and DELETE as well, and another (0004) refuses TRUNCATE. Each row
is hash-chained to the previous event of its tenant (audit.chain), so what the database owner
could still do around the triggers is detected by `manage.py audit_verify`.
"""
from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone

from audit.chain import CHAIN_FIELDS, append_chained
from audit.subjects import business_object_of


class AuditImmutable(Exception):
    """Raised when code tries to change or delete an audit event."""


class AuditEventQuerySet(models.QuerySet):
    def update(self, **kwargs):  # noqa: D102 - refuses by design
        raise AuditImmutable("audit events are append-only")

    def delete(self):  # noqa: D102
        raise AuditImmutable("audit events are append-only")


class AuditEvent(models.Model):
    """One decision on a tool call, confirmation or approval.

    Carries only the arguments hash and masked arguments, never a raw token or secret.
    """

    class Decision(models.TextChoices):
        ALLOWED = "ALLOWED"
        EXECUTED = "EXECUTED"
        FAILED = "FAILED"
        IDEMPOTENT_HIT = "IDEMPOTENT_HIT"
        DENIED = "DENIED"
        INVALID = "INVALID"
        NOT_FOUND = "NOT_FOUND"
        CONFIRMATION_REQUIRED = "CONFIRMATION_REQUIRED"
        CONFIRMED = "CONFIRMED"
        APPROVED = "APPROVED"
        REJECTED = "REJECTED"
        CANCELLED = "CANCELLED"
        EXPIRED = "EXPIRED"
        CONSUMED = "CONSUMED"
        REFUSED = "REFUSED"
        RECOVERED = "RECOVERED"
        # An approver edited the arguments (old -> new hash in the message), answered with guidance
        # for the model, or the requester withdrew the request.
        EDITED = "EDITED"
        RESPONDED = "RESPONDED"
        WITHDRAWN = "WITHDRAWN"
        # A control-plane change (whitelist, overrides, grants, members, roles, groups, API
        # tokens): status CREATED / CHANGED / DELETED, old -> new values in masked_arguments.
        CONTROL_CHANGE = "CONTROL_CHANGE"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    occurred_at = models.DateTimeField(auto_now_add=True, db_index=True)
    # No index of its own: every index of this model leads with the tenant (Meta.indexes).
    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.PROTECT, related_name="+", db_index=False)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    request_id = models.CharField(max_length=64, blank=True)
    conversation_id = models.UUIDField(null=True, blank=True, db_index=True)
    run_id = models.UUIDField(null=True, blank=True, db_index=True)
    tool_call_id = models.CharField(max_length=128, blank=True)
    tool_name = models.CharField(max_length=100, blank=True, db_index=True)
    tool_owner = models.CharField(max_length=200, blank=True, help_text="The tool's owner when the call was decided.")
    tool_version = models.CharField(max_length=64, blank=True, help_text="The tool's version when the call was decided.")
    decision = models.CharField(max_length=32, choices=Decision.choices, db_index=True)
    policy_decision = models.CharField(max_length=32, blank=True)
    status = models.CharField(max_length=64, blank=True, help_text="The stable result code (ToolResult.code).")
    arguments_hash = models.CharField(max_length=64, blank=True)
    masked_arguments = models.JSONField(null=True, blank=True)
    confirmation_id = models.UUIDField(null=True, blank=True)
    idempotency_key = models.CharField(max_length=128, blank=True)
    business_result_id = models.CharField(max_length=128, blank=True)
    duration_ms = models.FloatField(null=True, blank=True)
    message = models.CharField(max_length=500, blank=True)
    # Which process ran the call and under which lease of its run: {"holder": "host:pid", "lease":
    # the run's lease_expires_at the fence checked (ISO 8601), or null when the call was not fenced:
    # a read-only tool, a call outside a run}. Set on the
    # rows the execution writes (EXECUTED, FAILED, IDEMPOTENT_HIT, REFUSED at consume), so a side
    # effect can be traced to the holder that made it (docs/operations.md, "Runs, leases and recovery").
    execution = models.JSONField(null=True, blank=True,
                                 help_text="The process (host:pid) and the run lease under which the call ran.")
    # The tenant's policy bundle version in force when the call was judged, and the ids of the rules
    # and limits that set its gate or denied it (docs/policy.md). Empty: no bundle, or the registry decided.
    policy_version = models.PositiveIntegerField(null=True, blank=True)
    policy_rules = models.JSONField(null=True, blank=True)
    # How the call reached the platform when not through the platform's own agent loop (hashed):
    # {"name": "mcp", "api_key": <key name>, "api_key_id": <public id>, "client": <MCP clientInfo>}.
    channel = models.JSONField(null=True, blank=True,
                               help_text="How the call arrived when not through the platform's own chat (MCP: the key's name).")
    # What the row is about (an order id, ...; audit.subjects): derived from masked_arguments when
    # the row is written, outside the hashed body (audit.chain.UNHASHED_FIELDS), for the auditor's search.
    business_object = models.CharField(max_length=128, blank=True, editable=False,
                                       help_text="The business object the row is about (e.g. an order id).")
    # The hash chain (audit.chain): position in the tenant's trail, the previous event's hash, and
    # SHA-256(prev_hash:chain_seq:SHA-256(canonical JSON of this row)). Set by the database write.
    chain_seq = models.BigIntegerField(null=True, blank=True, editable=False)
    prev_hash = models.CharField(max_length=64, blank=True, editable=False)
    row_hash = models.CharField(max_length=64, blank=True, editable=False)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        ordering = ["occurred_at", "id"]
        permissions = [("export_auditevent", "Can read and export the audit trail")]
        # Every filter of the auditor's lists has an index that leads with (tenant, the filter's
        # column) and ends with chain_seq, the order the lists page by: a filtered page reads its
        # rows from the index in order and stops at the page's end, never sorting every match
        # (docs/performance.md "Scale: the audit trail"). The time index carries chain_seq so a
        # time range's chain positions come from the index alone (audit.export).
        indexes = [models.Index(fields=["tenant", "occurred_at", "chain_seq"], name="audit_event_time"),
                   models.Index(fields=["tenant", "business_object", "chain_seq"], name="audit_event_object"),
                   models.Index(fields=["tenant", "tool_name", "chain_seq"], name="audit_event_tool"),
                   models.Index(fields=["tenant", "status", "chain_seq"], name="audit_event_status"),
                   models.Index(fields=["tenant", "actor", "chain_seq"], name="audit_event_actor"),
                   models.Index(fields=["tenant", "decision", "chain_seq"], name="audit_event_decision")]
        constraints = [models.UniqueConstraint(fields=["tenant", "chain_seq"], name="audit_event_chain_position")]

    def __str__(self) -> str:
        return f"{self.occurred_at:%Y-%m-%d %H:%M:%S} {self.tool_name} {self.decision}"

    def save(self, *args, **kwargs) -> None:
        """Insert once, chained (audit.chain.append_chained: inside a transaction, right before its
        COMMIT; the chain columns are set once written). Raises AuditImmutable for any attempt to
        save an existing row."""
        if not self._state.adding:
            raise AuditImmutable("audit events are append-only")
        if self.occurred_at is None:
            self.occurred_at = timezone.now()
        if not self.business_object:
            self.business_object = business_object_of(decision=self.decision, masked_arguments=self.masked_arguments)
        values = {f.attname: getattr(self, f.attname) for f in self._meta.concrete_fields
                  if f.attname not in CHAIN_FIELDS}
        append_chained(values, stored=self._chained)
        self._state.adding = False

    def _chained(self, link: tuple[int, str, str]) -> None:
        self.chain_seq, self.prev_hash, self.row_hash = link

    def delete(self, *args, **kwargs):
        """Always raises AuditImmutable."""
        raise AuditImmutable("audit events are append-only")


class AuditChainHead(models.Model):
    """The newest link of one tenant's audit chain (audit.chain): advanced, under its row lock, by
    every audit INSERT of the tenant. PostgreSQL refuses DELETE and TRUNCATE on it (migration 0004).
    """

    tenant = models.OneToOneField("tenancy.Tenant", primary_key=True, on_delete=models.PROTECT, related_name="+")
    seq = models.BigIntegerField()
    prev_hash = models.CharField(max_length=64, blank=True)
    hash = models.CharField(max_length=64)

    def __str__(self) -> str:
        return f"{self.tenant_id}@{self.seq}"


class RetentionArchive(models.Model):
    """One file of records that left the database under a tenant's retention (docs/operations.md,
    "Retention and storage"), written and fsynced before any of its rows were deleted.

    kind AUDIT: the tenant's audit rows chain_seq `first_seq`..`last_seq` as a JSON Lines export
    (audit.export) that `python -m audit.verify_export FILE` checks; `prev_hash` is the row_hash
    the first of them links to ("" from the start of the trail), `last_hash` the last one's
    row_hash: the online chain continues from it (audit.chain.online_chain_start). On PostgreSQL
    an audit row may be deleted only when its chain_seq is at most the newest AUDIT archive's
    `last_seq` (trigger of migration 0014), and rows of this table can be neither changed nor
    deleted. kind REQUESTS: decided confirmation requests with their approvals and views (no
    chain positions). `sha256`: hex SHA-256 of the file's bytes; `rows`: records in it; `path`:
    relative to RETENTION_ARCHIVE_DIR.
    """

    class Kind(models.TextChoices):
        AUDIT = "AUDIT"
        REQUESTS = "REQUESTS"

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.PROTECT, related_name="+")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    first_seq = models.BigIntegerField(null=True, blank=True)
    last_seq = models.BigIntegerField(null=True, blank=True)
    prev_hash = models.CharField(max_length=64, blank=True)
    last_hash = models.CharField(max_length=64, blank=True)
    path = models.CharField(max_length=500)
    sha256 = models.CharField(max_length=64)
    rows = models.PositiveIntegerField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["tenant", "kind", "last_seq"], name="retention_archive_last")]
        constraints = [models.UniqueConstraint(fields=["tenant", "kind", "first_seq"], name="retention_archive_once")]

    def __str__(self) -> str:
        return f"{self.tenant_id} {self.kind} {self.path}"


class AuditVerifyCheckpoint(models.Model):
    """How far one tenant's chain was last verified: the row at `seq` had `row_hash` when a run
    that found no fault up to it ended at `verified_at` (audit.verify_checkpoint).

    `seal` is an HMAC-SHA256 of (tenant, seq, row_hash, verified_at) under a key derived from
    SECRET_KEY: someone who can write the table but does not hold the key cannot move the
    checkpoint past rows they rewrote (docs/audit.md, "Incremental verification"). Written only
    by `checkpoint_advance`; a deleted checkpoint only makes the next run a full one.
    """

    tenant = models.OneToOneField("tenancy.Tenant", primary_key=True, on_delete=models.CASCADE, related_name="+")
    seq = models.BigIntegerField()
    row_hash = models.CharField(max_length=64)
    verified_at = models.DateTimeField()
    seal = models.CharField(max_length=64)

    def __str__(self) -> str:
        return f"{self.tenant_id}@{self.seq}"
