"""The requester's side of a gated call: confirm or cancel with the one-time token, or get a fresh
token for a pending call (POST /api/v1/confirmations/...)."""
from __future__ import annotations

import uuid

from drf_spectacular.utils import extend_schema, extend_schema_field, extend_schema_serializer, extend_schema_view
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from agentplatform.api.base import ApiView
from agentplatform.api.serializers import StrictCharField, StrictInputSerializer
from agentplatform.api.schema import BODY, COMMON, errors
from agentplatform.api.throttling import ApiScopeThrottle
from agentplatform.runtime.models import Run
from approvals import requester_actions

from approvals.models import ConfirmationRequest
from tools.models import RiskLevel


@extend_schema_serializer(component_name="Confirmation")
class ConfirmationSerializer(serializers.Serializer):
    """The public shape of a confirmation request (never its token or raw arguments)."""

    id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=ConfirmationRequest.Status.choices)
    tool = serializers.CharField(source="tool_name")
    summary = serializers.CharField()
    risk = serializers.ChoiceField(choices=RiskLevel.choices)
    expires_at = serializers.DateTimeField()
    conversation_id = serializers.UUIDField()
    run_id = serializers.UUIDField(allow_null=True, help_text="Follow the resumed run with /runs/{id}/events/.")
    run_status = serializers.SerializerMethodField(help_text=(
        "The run's status now: AWAITING_CONFIRMATION after a committed decision means it waits to resume "
        "(other calls still undecided, or its resume is queued)."))
    outcome_code = serializers.CharField(allow_blank=True)

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_run_status(self, request: ConfirmationRequest) -> str | None:
        return Run.objects.filter(pk=request.run_id).values_list("status", flat=True).first() if request.run_id else None


@extend_schema_serializer(component_name="ConfirmationTokenInput")
class TokenInputSerializer(StrictInputSerializer):
    token = StrictCharField(max_length=200, help_text="The one-time token from the chat response.")


def _fresh(request: ConfirmationRequest) -> ConfirmationRequest:
    # The decision committed and (eagerly) the run resumed: answer with the stored state.
    return ConfirmationRequest.objects.get(pk=request.pk)


class _TokenDecisionApi(ApiView):
    """A requester's decision on their own gated call, by token; subclasses set `decide`, the service
    `(token=, user=) -> ConfirmationRequest` to call."""

    throttle_classes = [ApiScopeThrottle]
    throttle_scope = "confirm"

    def post(self, request: Request) -> Response:
        serializer = TokenInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        decided = self.decide(token=serializer.validated_data["token"], user=request.user)
        return Response(ConfirmationSerializer(_fresh(decided)).data)


# Per method (extend_schema_view): an operation_id on the class is drf_spectacular.W002 in `check --deploy`.
@extend_schema_view(post=extend_schema(
    operation_id="confirmations_confirm", tags=["confirmations"], summary="Confirm with a token", request=TokenInputSerializer,
    responses={200: ConfirmationSerializer, **errors(*BODY, *COMMON, 404, 409, 410)}))
class ConfirmationConfirmApi(_TokenDecisionApi):
    """I confirm my own gated call with its token; the run resumes after the commit."""

    decide = staticmethod(requester_actions.confirmation_confirm)


# Per method (extend_schema_view): an operation_id on the class is drf_spectacular.W002 in `check --deploy`.
@extend_schema_view(post=extend_schema(
    operation_id="confirmations_cancel", tags=["confirmations"], summary="Cancel with a token", request=TokenInputSerializer,
    responses={200: ConfirmationSerializer, **errors(*BODY, *COMMON, 404, 409, 410)}))
class ConfirmationCancelApi(_TokenDecisionApi):
    """I decline my own gated call with its token; the model is told it was rejected."""

    decide = staticmethod(requester_actions.confirmation_cancel)


class ConfirmationTokenApi(ApiView):
    """A fresh token for my own PENDING requester-confirmed call, voiding the previous one.

    For calls gated during a background resume, whose token never reached me.
    """

    throttle_classes = [ApiScopeThrottle]
    throttle_scope = "confirm"

    @extend_schema_serializer(component_name="ConfirmationToken")
    class OutputSerializer(serializers.Serializer):
        confirmation_id = serializers.UUIDField()
        token = serializers.CharField(help_text="Shown once; only its SHA-256 is stored.")
        expires_at = serializers.DateTimeField()

    @extend_schema(operation_id="confirmations_token", tags=["confirmations"], summary="Issue a fresh token",
                   request=None, responses={200: OutputSerializer, **errors(*COMMON, 404, 409, 410)})
    def post(self, request: Request, confirmation_id: uuid.UUID) -> Response:
        token = requester_actions.confirmation_issue_token(request_id=confirmation_id, user=request.user)
        expires_at = ConfirmationRequest.objects.values_list("expires_at", flat=True).get(pk=confirmation_id)
        return Response(self.OutputSerializer(
            {"confirmation_id": confirmation_id, "token": token, "expires_at": expires_at}).data)
