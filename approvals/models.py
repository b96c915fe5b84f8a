"""Confirmation requests (one gated tool call each) and the human decisions on them."""
from __future__ import annotations

import datetime
import uuid
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.expressions import RawSQL

from core import clock
from core.sql.literals import identifier_sql


class ConfirmationRequestQuerySet(models.QuerySet):
    """Derived states of requests, spelled once.

    "Open": PENDING and not past `expires_at`, so a person may still decide it. "Due": PENDING and
    past `expires_at`, waiting for the expiry sweep. Only an undecided request expires: a CONFIRMED
    request is a decision already made, kept until its turn settles, and never relabelled EXPIRED.
    """

    def open(self, *, now: datetime.datetime | None = None) -> ConfirmationRequestQuerySet:
        """Requests a person may still decide at `now` (default: the clock's now)."""
        return self.filter(**ConfirmationRequest.open_conditions(now or clock.now()))

    def due(self, *, now: datetime.datetime | None = None) -> ConfirmationRequestQuerySet:
        """Requests past their deadline at `now` (default: the clock's now) that nobody decided:
        the ones the expiry sweep marks EXPIRED. The status is written into the statement
        (`_PENDING`), so a prepared statement's generic plan knows it asks for the few waiting
        rows, not for every request whose deadline passed (decided ones included)."""
        return self.filter(status=_PENDING, expires_at__lte=now or clock.now())

    def any_due(self, *, now: datetime.datetime | None = None, tenant_id: int | None = None) -> bool:
        """Whether any request (of tenant `tenant_id`, or of every tenant) is past its deadline at
        `now` and undecided. Asked as "the earliest deadline of a waiting request", which the
        partial indexes `request_due_by_tenant` / `request_due` answer with one index entry however
        many requests wait or were decided (tests/approvals/test_expiry_check_plan.py).
        One SELECT."""
        waiting = self.filter(status=_PENDING)  # written into the statement: see `due`
        if tenant_id:
            waiting = waiting.filter(tenant_id=tenant_id)
        earliest = waiting.order_by("expires_at").values_list("expires_at", flat=True).first()
        return earliest is not None and earliest <= (now or clock.now())

    def pending_or_confirmed(self) -> ConfirmationRequestQuerySet:
        """Requests not yet run nor ended (PENDING or CONFIRMED): what a newer request for the same
        action supersedes and what an ended run or a moved requester cancels."""
        return self.filter(status__in=ConfirmationRequest.NOT_YET_RUN)


class ConfirmationRequest(models.Model):
    """One pending gated tool call, bound to tenant, user, conversation, tool, arguments hash and expiry.

    States (docs/decisions.md): PENDING -> CONFIRMED -> CONSUMED,
    or PENDING -> EXPIRED (nobody decided in time; a CONFIRMED request never expires),
    CANCELLED (the requester declined, an approver rejected, or the run was cancelled),
    SUPERSEDED (a newer request for the same business action replaced it), REFUSED (confirmed,
    but the policy, permissions, whitelist, precheck or idempotency record in force at consume
    time refused it; nothing ran). A CONFIRMED request whose policy became stricter goes back to
    PENDING under the new policy (audited REGATED). `decided_by` / `decision_reason` say who ended
    it and why; `outcome_code` what happened at execution (OK, a business failure code, or the
    refusal code). RESPONDED: an approver answered with guidance instead of a decision (nothing ran;
    the model reads the guidance). WITHDRAWN: the requester withdrew it while it
    was pending (nothing ran). An approver's edit replaces `arguments` (and the binding:
    `arguments_hash`, `masked_arguments`, `summary`, `approval_context`) and increments `revision`;
    the first binding's hash stays in `original_arguments_hash`, and only decisions on the current
    revision count towards the quorum. Only the SHA-256 of the requester's token is stored (`token_hash`); approver-gated
    requests have no token. `arguments` are the validated, normalised parameters that will
    run: on approval the stored call is executed, never what a client sends back later.
    """

    class Status(models.TextChoices):
        PENDING = "PENDING"
        CONFIRMED = "CONFIRMED"
        CONSUMED = "CONSUMED"
        EXPIRED = "EXPIRED"
        CANCELLED = "CANCELLED"
        SUPERSEDED = "SUPERSEDED"
        REFUSED = "REFUSED"
        RESPONDED = "RESPONDED"
        WITHDRAWN = "WITHDRAWN"

    class Policy(models.TextChoices):
        REQUESTER = "REQUESTER", "Requester confirmation"
        APPROVERS = "APPROVERS", "Approvers with quorum"

    # Requests not yet run nor ended: PENDING, or CONFIRMED and waiting for their turn.
    NOT_YET_RUN = (Status.PENDING, Status.CONFIRMED)

    objects = ConfirmationRequestQuerySet.as_manager()

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # No index of its own: every index of this model leads with the tenant (Meta.indexes).
    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.PROTECT, related_name="+", db_index=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="confirmation_requests")
    conversation_id = models.UUIDField(db_index=True)
    run_id = models.UUIDField(null=True, blank=True, db_index=True)
    tool_call_id = models.CharField(max_length=128, blank=True)
    tool = models.ForeignKey("tools.Tool", on_delete=models.PROTECT, related_name="confirmation_requests")
    tool_name = models.CharField(max_length=100)
    arguments = models.JSONField()
    masked_arguments = models.JSONField()
    arguments_hash = models.CharField(max_length=64)
    summary = models.CharField(max_length=500)
    risk = models.CharField(max_length=16)
    policy = models.CharField(max_length=16, choices=Policy.choices)
    quorum = models.PositiveSmallIntegerField(default=1)
    token_hash = models.CharField(max_length=64, null=True, blank=True, unique=True)
    # No index of its own: `request_due` leads with it (Meta.indexes).
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    context_excerpt = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(db_index=True)
    confirmed_at = models.DateTimeField(null=True, blank=True)
    consumed_at = models.DateTimeField(null=True, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
                                   related_name="+", help_text="Who ended the request (empty: the platform).")
    decision_reason = models.CharField(max_length=500, blank=True,
                                       help_text="Why it ended: a rejection's reason, what superseded it, ...")
    outcome_code = models.CharField(max_length=64, blank=True,
                                    help_text="What happened when it was consumed: OK, a failure or refusal code.")
    idempotency_key = models.CharField(max_length=128, blank=True,
                                       help_text="The call's idempotency key: a newer request with it supersedes.")
    business_object = models.CharField(max_length=200, blank=True,
                                       help_text="The business object the call acts on, when the tool declares it.")
    approval_context = models.JSONField(
        default=dict, blank=True,
        help_text=('What the approvers were shown beside the arguments, masked, captured when the request was '
                   'created: {"facts": {...}, "written_by_assistant": {argument: text}, "captured_at": ISO time}.'))

    revision = models.PositiveIntegerField(
        default=0, help_text="How many times approvers edited the arguments; decisions count for the current one.")
    original_arguments_hash = models.CharField(
        max_length=64, blank=True, help_text="The arguments hash the model asked for, kept when an approver edits.")
    policy_version = models.PositiveIntegerField(
        null=True, blank=True, help_text="The tenant's policy bundle version the gate was set under (empty: none).")
    policy_rules = models.JSONField(
        null=True, blank=True, help_text='The ids of the bundle rules and limits that set the gate, e.g. ["refunds-over-500-need-two"].')

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["tenant", "status", "-created_at"]),
            # The settle-on-read expiry check before every page and API call (approvals.expiry:
            # "the earliest deadline of a waiting request of this tenant") and the sweeper's (of any
            # tenant): one index entry, whatever the number waiting or decided.
            # Not partial indexes: the status is a bound parameter of a prepared statement, and a
            # generic plan cannot prove a partial index's predicate.
            models.Index(fields=["tenant", "status", "expires_at"], name="request_due_by_tenant"),
            models.Index(fields=["status", "expires_at"], name="request_due"),
            # The lists, each in the order it pages (newest first, the id breaking ties), so a page
            # reads its own rows and stops: the approvers' history and open lists (tenant, policy),
            # a requester's own requests (tenant, user), the tenant administrator's changelist.
            models.Index(fields=["tenant", "policy", "-created_at", "-id"], name="request_policy_newest"),
            models.Index(fields=["tenant", "user", "-created_at", "-id"], name="request_requester_newest"),
            models.Index(fields=["tenant", "-created_at", "-id"], name="request_tenant_newest"),
            # The older open requests a new one supersedes (approvals.proposal), read on every gated
            # call: the requester's open rows of that tool, never their history or the tenant's
            # backlog, whatever the planner's statistics. Partial: that statement writes the
            # statuses into its text (select_rows' `in_literal`), so a generic plan proves it too.
            models.Index(fields=["tenant", "user", "tool_name"], name="request_requester_open",
                         condition=Q(status__in=["PENDING", "CONFIRMED"])),
        ]

    def __str__(self) -> str:
        return f"{self.tool_name} {self.status} ({self.id})"

    @classmethod
    def open_conditions(cls, now: datetime.datetime) -> dict[str, Any]:
        """The field conditions of an open request at `now` (PENDING, not past `expires_at`), as
        keyword arguments of a filter."""
        return {"status": cls.Status.PENDING, "expires_at__gt": now}

    @classmethod
    def open_statement_conditions(cls, now: datetime.datetime) -> dict[str, Any]:
        """`open_conditions(now)` for the prebuilt statements of core.sql (which take conditions
        rather than querysets), the status written into the statement: a requester's decision by
        token then reads their open rows (request_requester_open) or the token's own entry, never
        their history, even in a prepared statement's generic plan."""
        return {"status__in_literal": (cls.Status.PENDING,), "expires_at__gt": now}

    @classmethod
    def open_q(cls, now: datetime.datetime) -> Q:
        """`open_conditions(now)` as a Q, to combine or negate in a filter."""
        return Q(**cls.open_conditions(now))

    def is_open_at(self, now: datetime.datetime) -> bool:
        """Whether a person may still decide this request at `now` (PENDING, not past `expires_at`)."""
        return self.status == self.Status.PENDING and self.expires_at > now

    def is_due_at(self, now: datetime.datetime) -> bool:
        """Whether this request is past its deadline at `now` with nobody having decided it, though
        the expiry sweep has not marked it EXPIRED yet."""
        return self.status == self.Status.PENDING and self.expires_at <= now

    def is_expired_at(self, now: datetime.datetime) -> bool:
        """Whether this request expired by `now`: marked EXPIRED, or due and not swept yet."""
        return self.status == self.Status.EXPIRED or self.is_due_at(now)


# PENDING as a constant of the statement's text, not a bound parameter (ConfirmationRequestQuerySet
# `due`, `any_due`): a prepared statement's generic plan then plans for that status's few rows.
# With the status bound, PostgreSQL's generic plan for "the earliest deadline of a waiting
# request" may walk the `expires_at` index through every decided request (162 ms at 100,000
# decided against 0.46 ms, bench/scale.py); psycopg prepares a statement after
# DB_PREPARE_THRESHOLD runs on a connection. The status is the code's own identifier.
_PENDING = RawSQL(identifier_sql(ConfirmationRequest.Status.PENDING), ())


class Approval(models.Model):
    """One human decision on a ConfirmationRequest. An approver decides each revision once.

    EDIT: the approver changed the arguments (`changes`: [{"field", "from", "to"}], masked;
    `arguments_hash`: the new binding) and approves what they wrote; the request's `revision` is
    the row's. RESPOND: guidance for the model instead of a decision (`comment`); ends the request.
    Only APPROVE and EDIT rows of the request's current revision count towards its quorum.
    """

    class Decision(models.TextChoices):
        APPROVE = "APPROVE"
        REJECT = "REJECT"
        EDIT = "EDIT"
        RESPOND = "RESPOND"

    request = models.ForeignKey(ConfirmationRequest, on_delete=models.PROTECT, related_name="approvals")
    approver = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="approvals")
    decision = models.CharField(max_length=8, choices=Decision.choices)
    comment = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    revision = models.PositiveIntegerField(default=0, help_text="The request's revision this decision is about.")
    arguments_hash = models.CharField(max_length=64, blank=True, help_text="The binding decided on (an EDIT: the new one).")
    changes = models.JSONField(default=list, blank=True, help_text='EDIT only: [{"field", "from", "to"}], masked.')

    class Meta:
        ordering = ["created_at"]
        constraints = [models.UniqueConstraint(fields=["request", "approver", "revision"],
                                               name="one_decision_per_approver_and_revision")]
        indexes = [models.Index(fields=["created_at"], name="approval_decided_at")]  # quality windows

    def __str__(self) -> str:
        return f"{self.approver_id} {self.decision} {self.request_id}"


class RequestClaim(models.Model):
    """An approver's reservation of a request for a few minutes (`expires_at`): others see who is
    looking; it never blocks anyone's decision. At most one per request; a claim past
    `expires_at` counts as released. Deleted when the request is decided."""

    request = models.OneToOneField(ConfirmationRequest, on_delete=models.CASCADE, primary_key=True,
                                   related_name="claim")
    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.PROTECT, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    claimed_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.user_id} claims {self.request_id} until {self.expires_at:%H:%M:%S}"


class RequestView(models.Model):
    """An approver opened a request's facts (one row per opening; `viewed_at` UTC). Read by the
    approval quality report: a decision with no view before it was made without the facts."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.PROTECT, related_name="+")
    request = models.ForeignKey(ConfirmationRequest, on_delete=models.CASCADE, related_name="views")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    viewed_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["request", "user", "viewed_at"]),
                   models.Index(fields=["tenant", "viewed_at"])]

    def __str__(self) -> str:
        return f"{self.user_id} viewed {self.request_id} at {self.viewed_at:%Y-%m-%d %H:%M:%S}"
