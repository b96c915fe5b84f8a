"""An approver's claim on a request: POST /api/v1/approvals/{id}/claim/ (take or renew),
DELETE .../claim/ or POST .../release/ (drop my own). A claim tells other approvers who is looking
at a request for APPROVAL_CLAIM_SECONDS; it never blocks anyone's decision (docs/approvals.md)."""
from __future__ import annotations

import uuid

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from agentplatform.api.base import ApiView
from agentplatform.api.schema import COMMON, errors
from approvals import claims


@extend_schema_serializer(component_name="ApprovalClaim")
class ClaimSerializer(serializers.Serializer):
    """Who holds the claim on a request now (all null when nobody does)."""

    request = serializers.UUIDField(source="request_id")
    claimed_by = serializers.SerializerMethodField(help_text="The claimer's username; null when nobody claims it.")
    claimed_at = serializers.DateTimeField(allow_null=True)
    expires_at = serializers.DateTimeField(allow_null=True, help_text="When the claim lapses on its own.")
    mine = serializers.BooleanField(help_text="Whether you hold the claim.")

    def get_claimed_by(self, state: claims.ClaimState) -> str | None:
        return state.user.get_username() if state.user is not None else None


class ApprovalClaimApi(ApiView):
    """Claim a request I may decide now, or drop my claim."""

    @extend_schema(operation_id="approvals_claim", tags=["approvals"], summary="Claim a request for review",
                   description=(
                       "Reserves the request for you for APPROVAL_CLAIM_SECONDS (default 300), or renews your own "
                       "claim. When another approver holds a live claim it stays theirs and is returned (`mine`: "
                       "false). A claim never blocks a decision; it ends on a decision or when it lapses. Only "
                       "someone who may decide the request may claim it: 403 APPROVAL_FORBIDDEN; a request no "
                       "longer open: 409 CONFIRMATION_NOT_OPEN; another tenant's or unknown: 404."),
                   request=None, responses={200: ClaimSerializer, **errors(*COMMON, 404, 409)})
    def post(self, request: Request, request_id: uuid.UUID) -> Response:
        return Response(ClaimSerializer(claims.claim_take(request_id=request_id, user=request.user)).data)

    @extend_schema(operation_id="approvals_claim_release", tags=["approvals"], summary="Release my claim",
                   description="Drops your own claim (someone else's stays). Answers the claim in force after it.",
                   request=None, responses={200: ClaimSerializer, **errors(*COMMON, 404)})
    def delete(self, request: Request, request_id: uuid.UUID) -> Response:
        return Response(ClaimSerializer(claims.claim_release(request_id=request_id, user=request.user)).data)


class ApprovalReleaseApi(ApiView):
    """The same as DELETE .../claim/, for clients that only POST."""

    @extend_schema(operation_id="approvals_release", tags=["approvals"], summary="Release my claim (POST)",
                   request=None, responses={200: ClaimSerializer, **errors(*COMMON, 404)})
    def post(self, request: Request, request_id: uuid.UUID) -> Response:
        return Response(ClaimSerializer(claims.claim_release(request_id=request_id, user=request.user)).data)
