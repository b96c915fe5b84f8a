"""The approvers' side: GET /api/v1/approvals/ and POST /api/v1/approvals/{id}/approve|reject|edit|respond/."""
from __future__ import annotations

import uuid

from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema, extend_schema_field, extend_schema_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from core import clock
from agentplatform.api.base import ApiView
from agentplatform.api.pagination import CappedCountPagePagination, paginated_response
from agentplatform.api.serializers import StrictCharField, StrictInputSerializer, query_values
from agentplatform.api.schema import BODY, COMMON, errors
from agentplatform.api.throttling import ApiScopeThrottle
from core.errors import NotFoundError
from approvals import amendments, approver_actions, claims, eligibility, independence
from approvals.inbox import live_claim
from approvals.models import Approval, ConfirmationRequest
from approvals.selectors import (approval_facts, edit_rules_of, outcome_of, request_as_seen_by_decider,
                                 requests_decidable_by, requests_history_for)
from tools.models import RiskLevel

Status = ConfirmationRequest.Status


# An arguments hash is the SHA-256 hex digest the API shows (tools.hashing); anything else is 400,
# not 409 ARGUMENTS_CHANGED ("another approver edited them"), which it could never be.
ARGUMENTS_HASH = RegexValidator(r"^[0-9a-f]{64}$", message="must be the 64 lower-case hex digits of an arguments_hash")


@extend_schema_serializer(component_name="ApprovalRequest")
class ApprovalRequestSerializer(serializers.Serializer):
    """A request as an approver sees it: what will run (masked), who asked, why, how far it is."""

    @extend_schema_serializer(component_name="ApprovalDecision")
    class DecisionSerializer(serializers.Serializer):
        approver = serializers.CharField(source="approver.username")
        decision = serializers.ChoiceField(choices=Approval.Decision.choices, help_text=(
            "APPROVE, REJECT, EDIT (changed the arguments and approves them), RESPOND (guidance instead)."))
        comment = serializers.CharField(allow_blank=True, help_text="A comment, a rejection's reason or guidance.")
        created_at = serializers.DateTimeField()
        revision = serializers.IntegerField(help_text="The revision of the arguments this decision is about.")
        changes = serializers.JSONField(help_text='EDIT: [{"field", "from", "to"}] (masked); else [].')

    id = serializers.UUIDField()
    tool = serializers.CharField(source="tool_name")
    risk = serializers.ChoiceField(choices=RiskLevel.choices)
    requester = serializers.CharField(source="user.username")
    summary = serializers.CharField()
    masked_arguments = serializers.JSONField(help_text="The normalised arguments that will run, masked.")
    context_excerpt = serializers.CharField(allow_blank=True, help_text="The conversation that led to it.")
    approvals = serializers.IntegerField(source="approvals_count", help_text=(
        "APPROVE and EDIT decisions on the current revision (an edit restarts the quorum)."))
    quorum = serializers.IntegerField()
    policy_version = serializers.IntegerField(allow_null=True, help_text=(
        "The tenant's policy bundle version that judged the request when it was made (null: no bundle in force)."))
    policy_rules = serializers.SerializerMethodField(help_text=(
        'The ids of the bundle\'s rules and limits that set its gate, e.g. ["refunds-over-500-need-two"]; [] when '
        "the tool's registry policy (with the tenant's overrides) set it."))
    arguments_hash = serializers.CharField(help_text=(
        "The binding that will run; send it as `base_arguments_hash` when editing."))
    original_arguments_hash = serializers.CharField(allow_blank=True, help_text=(
        "The binding the model asked for, when approvers edited it (else empty)."))
    revision = serializers.IntegerField(help_text="How many times approvers edited the arguments.")
    status = serializers.SerializerMethodField(help_text=(
        "EXPIRED as soon as expires_at has passed while undecided (a CONFIRMED request never expires)."))
    decided_by_me = serializers.BooleanField()
    decisions = DecisionSerializer(source="approvals.all", many=True)
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    decided_at = serializers.DateTimeField(allow_null=True)
    outcome = serializers.SerializerMethodField(help_text=(
        "The real ending: PENDING, CONFIRMED, EXECUTED, FAILED (it ran, the business refused: see outcome_code), "
        "REFUSED (refused at consume time, nothing ran), REJECTED, CANCELLED (run ended), SUPERSEDED, EXPIRED. "
        "A failed call is never EXECUTED."))
    outcome_code = serializers.CharField(allow_blank=True, help_text=(
        "OK, IDEMPOTENT_HIT, a business failure or refusal code, RUN_ENDED; empty while undecided."))
    facts = serializers.SerializerMethodField(help_text=(
        "The tool's approval context (masked, tenant-scoped): `snapshot` as captured when the request was made, "
        "`live` recomputed now for a PENDING request (else null), `changed` names the facts that differ, "
        "`captured_at`. Money values are {amount, currency, display}."))
    edit_rules = serializers.SerializerMethodField(help_text=(
        "What an approver may change with POST .../edit/: [{field, rule, limit}], rule ANY or DECREASE_ONLY "
        "(never above `limit`, the requester's own value; null: no limit but the tool's). Any other argument "
        "is fixed (400 EDIT_NOT_ALLOWED); [] when nothing is editable or the request is no longer pending."))
    written_by_assistant = serializers.SerializerMethodField(help_text=(
        "Free-text arguments in the model's own words (e.g. a reason), capped: show them quoted and labelled, "
        "never as the platform's words."))
    eligible_approvers = serializers.SerializerMethodField(help_text=(
        "Usernames whose decision counts toward this request's quorum: approve_tool held on the tool, independent "
        "of the request (docs/approvals.md, \"Eligibility\")."))
    ineligible = serializers.SerializerMethodField(help_text=(
        "[{username, code, reason}]: who holds approve_tool (or asked) but does not count, and why: REQUESTER, "
        "SERVICE_ACCOUNT, GRANTED_BY_REQUESTER (their standing was proposed or approved by the requester), "
        "GRANTED_AFTER_REQUEST (it began after the request was created)."))

    claimed_by = serializers.SerializerMethodField(help_text="Who is reviewing it now (POST .../claim/), or null.")

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_claimed_by(self, request: ConfirmationRequest) -> str | None:
        claim = live_claim(request)
        return claim.user.get_username() if claim is not None else None

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_policy_rules(self, request: ConfirmationRequest) -> list[str]:
        return list(request.policy_rules or [])

    @extend_schema_field(serializers.ChoiceField(choices=Status.choices))
    def get_status(self, request: ConfirmationRequest) -> str:
        if request.is_due_at(clock.now()):
            return Status.EXPIRED
        return request.status

    @extend_schema_field(serializers.ChoiceField(choices=[(o, o) for o in (
        "PENDING", "CONFIRMED", "EXECUTED", "FAILED", "REFUSED", "REJECTED", "CANCELLED", "SUPERSEDED", "EXPIRED",
            "RESPONDED", "WITHDRAWN")]))
    def get_outcome(self, request: ConfirmationRequest) -> str:
        return outcome_of(request)["outcome"]

    def _facts(self, request: ConfirmationRequest) -> dict:
        cache = self.context.setdefault("_facts", {})
        if request.pk not in cache:
            cache[request.pk] = approval_facts(request)
        return cache[request.pk]

    @extend_schema_field(serializers.JSONField())
    def get_facts(self, request: ConfirmationRequest) -> dict:
        facts = self._facts(request)
        return {k: facts[k] for k in ("snapshot", "live", "changed", "captured_at")}

    @extend_schema_field(serializers.ListField(child=serializers.DictField()))
    def get_edit_rules(self, request: ConfirmationRequest) -> list:
        if request.status != Status.PENDING:
            return []
        return edit_rules_of(request)

    @extend_schema_field(serializers.ListField(child=serializers.DictField()))
    def get_written_by_assistant(self, request: ConfirmationRequest) -> list:
        return self._facts(request)["written_by_assistant"]

    def _eligibility(self, request: ConfirmationRequest) -> dict:
        cache = self.context.setdefault("_eligibility", {})
        if request.pk not in cache:
            cache[request.pk] = eligibility.approver_eligibility(request)
        return cache[request.pk]

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_eligible_approvers(self, request: ConfirmationRequest) -> list[str]:
        return [e["username"] for e in self._eligibility(request)["eligible"]]

    @extend_schema_field(serializers.ListField(child=serializers.DictField()))
    def get_ineligible(self, request: ConfirmationRequest) -> list[dict]:
        return self._eligibility(request)["ineligible"]


def _decided(user, request_id: uuid.UUID) -> Response:
    claims.claim_release_on_decision(request_id=request_id, user=user)  # a decision ends the claim on it
    row = request_as_seen_by_decider(user=user, request_id=request_id)
    if row is None:  # cannot happen after a successful decision; fail closed all the same
        raise NotFoundError("unknown confirmation request")
    return Response(ApprovalRequestSerializer(row).data)


class ApprovalListApi(ApiView):
    """Requests I may decide (`status=PENDING`, default) or could decide before (`status=history`),
    newest first: same tenant, approver-gated, `approve_tool` held on the tool, not my own."""

    pagination_class = CappedCountPagePagination

    @extend_schema_serializer(component_name="ApprovalListFilter")
    class FilterSerializer(serializers.Serializer):
        status = serializers.ChoiceField(choices=[("PENDING", "PENDING"), ("history", "history")],
                                         required=False, default="PENDING")

    @extend_schema(operation_id="approvals_list", tags=["approvals"], summary="Requests I may decide",
                   parameters=[FilterSerializer],
                   responses={200: ApprovalRequestSerializer(many=True), **errors(400, *COMMON, 404)})
    def get(self, request: Request) -> Response:
        filters = self.FilterSerializer(data=query_values(request))
        filters.is_valid(raise_exception=True)
        if filters.validated_data["status"] == "history":
            rows = requests_history_for(user=request.user)
        else:
            rows = requests_decidable_by(user=request.user)
        with independence.shared_standing():  # every row's eligibility: the standing read once per page
            return paginated_response(self, rows.select_related("claim__user"), ApprovalRequestSerializer)


class ApprovalApproveApi(ApiView):
    """Approve a request; at quorum it is CONFIRMED and the run resumes after the commit."""

    throttle_classes = [ApiScopeThrottle]
    throttle_scope = "approve"

    @extend_schema_serializer(component_name="ApproveInput")
    class InputSerializer(StrictInputSerializer):
        comment = StrictCharField(required=False, allow_blank=True, max_length=2000, default="")
        arguments_hash = StrictCharField(required=False, allow_blank=True, max_length=64, default="",
                                         validators=[ARGUMENTS_HASH], help_text=(
            "The `arguments_hash` you read; required once approvers edited the arguments. When they were edited "
            "since: 409 ARGUMENTS_CHANGED."))

    @extend_schema(operation_id="approvals_approve", tags=["approvals"], summary="Approve",
                   request=InputSerializer,
                   responses={200: ApprovalRequestSerializer, **errors(*BODY, *COMMON, 404, 409, 410)})
    def post(self, request: Request, request_id: uuid.UUID) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        approver_actions.confirmation_approve(request_id=request_id, approver=request.user,
                                       comment=serializer.validated_data["comment"],
                                       arguments_hash=serializer.validated_data["arguments_hash"])
        return _decided(request.user, request_id)


class ApprovalRejectApi(ApiView):
    """Reject a request with a reason (required); the model is told a human refused it."""

    throttle_classes = [ApiScopeThrottle]
    throttle_scope = "approve"

    @extend_schema_serializer(component_name="RejectInput")
    class InputSerializer(StrictInputSerializer):
        reason = StrictCharField(max_length=2000, help_text="Required: why the call must not run.")

    @extend_schema(operation_id="approvals_reject", tags=["approvals"], summary="Reject with a reason",
                   request=InputSerializer,
                   responses={200: ApprovalRequestSerializer, **errors(*BODY, *COMMON, 404, 409, 410)})
    def post(self, request: Request, request_id: uuid.UUID) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        approver_actions.confirmation_reject(request_id=request_id, approver=request.user,
                                      reason=serializer.validated_data["reason"])
        return _decided(request.user, request_id)


class ApprovalEditApi(ApiView):
    """Edit the arguments of a request I may decide (docs/approvals.md)."""

    throttle_classes = [ApiScopeThrottle]
    throttle_scope = "approve"

    @extend_schema_serializer(component_name="EditInput")
    class InputSerializer(StrictInputSerializer):
        arguments = serializers.DictField(help_text=(
            "The complete new arguments, checked like a model's call: the tool's schema (no extra fields), "
            "business rules, money normalisation, precheck. Refused: 400 INVALID_ARGUMENTS with `errors`. Only "
            "the arguments in the request's `edit_rules` may differ from the current ones, as their rule allows "
            "(an amount never above the requester's): else 400 EDIT_NOT_ALLOWED with `errors`."))
        base_arguments_hash = StrictCharField(max_length=64, validators=[ARGUMENTS_HASH], help_text=(
            "The `arguments_hash` you edited; when another approver edited first: 409 ARGUMENTS_CHANGED."))
        comment = StrictCharField(required=False, allow_blank=True, max_length=2000, default="")

    @extend_schema(operation_id="approvals_edit", tags=["approvals"], summary="Edit the arguments",
                   description=(
                       "Replaces the arguments with the tool's normalised form of `arguments` (a new binding: hash, "
                       "masked arguments, summary, facts); the first hash is kept in `original_arguments_hash`. The "
                       "quorum restarts; the edit counts as the editor's approval of the new arguments, but never "
                       "alone: someone else must approve too. The requester and the model are told who changed "
                       "what. An edit stays within what the requester asked for: a tool declares which arguments "
                       "may change and how (`edit_rules`); anything else is refused, never sent on. Errors: 400 "
                       "INVALID_ARGUMENTS (with `errors`), 400 EDIT_NOT_ALLOWED (with `errors`: one per field "
                       "and why, code NOT_EDITABLE or ABOVE_REQUESTED), 400 EDIT_UNCHANGED, 403 "
                       "APPROVAL_FORBIDDEN, 404 CONFIRMATION_INVALID, 409 ALREADY_DECIDED / ARGUMENTS_CHANGED, "
                       "410 CONFIRMATION_EXPIRED."),
                   request=InputSerializer,
                   responses={200: ApprovalRequestSerializer, **errors(*BODY, *COMMON, 404, 409, 410)})
    def post(self, request: Request, request_id: uuid.UUID) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        amendments.confirmation_edit(request_id=request_id, editor=request.user, arguments=data["arguments"],
                                     base_arguments_hash=data["base_arguments_hash"], comment=data["comment"])
        return _decided(request.user, request_id)


class ApprovalRespondApi(ApiView):
    """Answer with guidance for the assistant instead of a decision (docs/approvals.md)."""

    throttle_classes = [ApiScopeThrottle]
    throttle_scope = "approve"

    @extend_schema_serializer(component_name="RespondInput")
    class InputSerializer(StrictInputSerializer):
        guidance = StrictCharField(max_length=2000, help_text="Required: what the assistant should do instead.")

    @extend_schema(operation_id="approvals_respond", tags=["approvals"], summary="Respond with guidance",
                   description=(
                       "Ends the request RESPONDED: nothing runs, and the model gets a tool message with code "
                       "APPROVER_GUIDANCE carrying the guidance (not a success, not a rejection). Errors as approve."),
                   request=InputSerializer,
                   responses={200: ApprovalRequestSerializer, **errors(*BODY, *COMMON, 404, 409, 410)})
    def post(self, request: Request, request_id: uuid.UUID) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        amendments.confirmation_respond(request_id=request_id, approver=request.user,
                                        guidance=serializer.validated_data["guidance"])
        return _decided(request.user, request_id)
