"""The requester's side of their gated calls: GET /api/v1/my-requests/ and
POST /api/v1/my-requests/{id}/withdraw/. Only the caller's own requests; anyone else's is 404."""
from __future__ import annotations

import uuid

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
from agentplatform.api.views.approvals import ApprovalRequestSerializer
from core.errors import NotFoundError
from approvals import independence, requester_actions
from approvals.models import ConfirmationRequest
from approvals.presentation import decider
from approvals.requester_selectors import regates_of, requests_of
from approvals.eligibility import quorum_shortfall
from approvals.selectors import approval_facts, outcome_of
from tools.models import RiskLevel

Status = ConfirmationRequest.Status
OUTCOMES = ("PENDING", "CONFIRMED", "EXECUTED", "FAILED", "REFUSED", "REJECTED", "CANCELLED", "SUPERSEDED",
            "EXPIRED", "RESPONDED", "WITHDRAWN")


@extend_schema_serializer(component_name="MyRequest")
class MyRequestSerializer(serializers.Serializer):
    """One of my gated calls: what it will run (masked), who must decide, who decided so far and
    what they said, and how it ended."""

    id = serializers.UUIDField()
    tool = serializers.CharField(source="tool_name")
    risk = serializers.ChoiceField(choices=RiskLevel.choices)
    summary = serializers.CharField(help_text="In the platform's words, rebuilt from the arguments after an edit.")
    masked_arguments = serializers.JSONField(help_text="The normalised arguments that will run (after any edit), "
                                                       "masked.")
    needs = serializers.SerializerMethodField(help_text="requester (you confirm with the token) or approvers.")
    quorum = serializers.IntegerField()
    policy_version = serializers.IntegerField(allow_null=True, help_text=(
        "The tenant's policy bundle version that judged the request when it was made (null: no bundle in force)."))
    policy_rules = serializers.SerializerMethodField(help_text=(
        'The ids of the bundle\'s rules and limits that set its gate, e.g. ["refunds-over-500-need-two"]; [] when '
        "the tool's registry policy (with the tenant's overrides) set it."))
    approvals = serializers.IntegerField(source="approvals_count", help_text=(
        "APPROVE and EDIT decisions on the current revision."))
    decisions = ApprovalRequestSerializer.DecisionSerializer(source="approvals.all", many=True, help_text=(
        "Every approver's decision so far, with comments, guidance and edits (who changed what)."))
    revision = serializers.IntegerField(help_text="How many times approvers edited the arguments.")
    status = serializers.SerializerMethodField(help_text="EXPIRED as soon as expires_at passed while undecided.")
    outcome = serializers.SerializerMethodField(help_text="The real ending, as on the approvals API.")
    outcome_code = serializers.CharField(allow_blank=True)
    decided_by = serializers.SerializerMethodField(help_text='{"role", "username"} of who ended it, or null.')
    reason = serializers.CharField(source="decision_reason", allow_blank=True, help_text=(
        "Why it ended: a rejection's reason, the guidance, a withdrawal's reason, ..."))
    can_withdraw = serializers.SerializerMethodField(help_text="True while it is pending: POST .../withdraw/.")
    quorum_shortfall = serializers.SerializerMethodField(help_text=(
        "Pending approver-gated requests: how many approvals it still needs beyond what the people who may "
        "decide it now can give (0 when its quorum is reachable). Above 0 it can only expire: withdraw it, or "
        "have approve_tool granted."))
    conversation_id = serializers.UUIDField()
    run_id = serializers.UUIDField(allow_null=True)
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    decided_at = serializers.DateTimeField(allow_null=True)
    facts = serializers.SerializerMethodField(help_text="The tool's approval context (see the approvals API).")
    regated = serializers.SerializerMethodField(help_text=(
        'null, or {"at", "message"}: the last time this request was sent back to approvers because the policy '
        "of its tool became stricter after it was confirmed or approved, and why, in English / Chinese (also "
        "the CONFIRMATION_REQUIRED run event's `regated`)."))

    @extend_schema_field(serializers.ChoiceField(choices=[("requester", "requester"), ("approvers", "approvers")]))
    def get_needs(self, request: ConfirmationRequest) -> str:
        return "approvers" if request.policy == ConfirmationRequest.Policy.APPROVERS else "requester"

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_policy_rules(self, request: ConfirmationRequest) -> list[str]:
        return list(request.policy_rules or [])

    @extend_schema_field(serializers.ChoiceField(choices=Status.choices))
    def get_status(self, request: ConfirmationRequest) -> str:
        if request.is_due_at(clock.now()):
            return Status.EXPIRED
        return request.status

    @extend_schema_field(serializers.ChoiceField(choices=[(o, o) for o in OUTCOMES]))
    def get_outcome(self, request: ConfirmationRequest) -> str:
        return outcome_of(request)["outcome"]

    @extend_schema_field(serializers.DictField(allow_null=True))
    def get_decided_by(self, request: ConfirmationRequest) -> dict | None:
        return decider(request)

    @extend_schema_field(serializers.BooleanField())
    def get_can_withdraw(self, request: ConfirmationRequest) -> bool:
        return request.is_open_at(clock.now())

    def get_quorum_shortfall(self, request: ConfirmationRequest) -> int:
        return quorum_shortfall(request) if self.get_can_withdraw(request) else 0

    @extend_schema_field(serializers.DictField(allow_null=True))
    def get_regated(self, request: ConfirmationRequest) -> dict | None:
        # One query for the whole page (or the one request), kept in the serializer's context.
        regates = self.context.get("regates")
        if regates is None:
            page = list(self.root.instance) if self.root is not self else [request]
            regates = self.context["regates"] = regates_of(tenant_id=request.tenant_id,
                                                           request_ids=[r.pk for r in page])
        return regates.get(request.pk)

    @extend_schema_field(serializers.JSONField())
    def get_facts(self, request: ConfirmationRequest) -> dict:
        facts = approval_facts(request, live=False)
        return {k: facts[k] for k in ("snapshot", "captured_at")}


def _mine(user, request_id: uuid.UUID) -> Response:
    row = requests_of(user=user).filter(pk=request_id).first()
    if row is None:  # cannot happen after a successful withdrawal; fail closed all the same
        raise NotFoundError("unknown confirmation request")
    return Response(MyRequestSerializer(row).data)


class MyRequestListApi(ApiView):
    """My gated calls, newest first: `state=open` (can be withdrawn), `history`, or `all` (default)."""

    pagination_class = CappedCountPagePagination

    @extend_schema_serializer(component_name="MyRequestFilter")
    class FilterSerializer(serializers.Serializer):
        state = serializers.ChoiceField(choices=[("all", "all"), ("open", "open"), ("history", "history")],
                                        required=False, default="all")

    @extend_schema(operation_id="my_requests_list", tags=["confirmations"], summary="My requests",
                   parameters=[FilterSerializer],
                   responses={200: MyRequestSerializer(many=True), **errors(400, *COMMON, 404)})
    def get(self, request: Request) -> Response:
        filters = self.FilterSerializer(data=query_values(request))
        filters.is_valid(raise_exception=True)
        with independence.shared_standing():  # every open row's quorum shortfall: the standing read once per page
            return paginated_response(self, requests_of(user=request.user, state=filters.validated_data["state"]),
                                      MyRequestSerializer)


class MyRequestWithdrawApi(ApiView):
    """Withdraw one of my pending requests: nothing runs, its token is void, the run is told."""

    throttle_classes = [ApiScopeThrottle]
    throttle_scope = "approve"

    @extend_schema_serializer(component_name="WithdrawInput")
    class InputSerializer(StrictInputSerializer):
        reason = StrictCharField(required=False, allow_blank=True, max_length=500, default="")

    @extend_schema(operation_id="my_requests_withdraw", tags=["confirmations"], summary="Withdraw my request",
                   description=(
                       "Ends my PENDING request WITHDRAWN (audited): nothing runs, its confirmation token can no "
                       "longer be used, and the run resumes with a WITHDRAWN tool message for the model. Errors: "
                       "404 CONFIRMATION_INVALID (unknown, or not mine), 409 ALREADY_DECIDED (no longer pending), "
                       "410 CONFIRMATION_EXPIRED."),
                   request=InputSerializer,
                   responses={200: MyRequestSerializer, **errors(*BODY, *COMMON, 404, 409, 410)})
    def post(self, request: Request, request_id: uuid.UUID) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        requester_actions.confirmation_withdraw(request_id=request_id, requester=request.user,
                                         reason=serializer.validated_data["reason"])
        return _mine(request.user, request_id)
