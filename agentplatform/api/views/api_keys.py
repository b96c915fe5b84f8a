"""API keys: GET/POST /api/v1/api-keys/ and DELETE /api/v1/api-keys/{id}/ (docs/operations.md, "API keys").

A key is shown once, to the user it authenticates: `user` naming another person is refused with
403 KEY_FOR_ANOTHER_PERSON and nothing is created; only a service account's key may be received
by a tenant administrator of its tenant or a platform operator.
"""
from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib.auth import get_user_model
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from agentplatform.api.base import ApiView
from agentplatform.api.pagination import PagePagination, paginated_response
from agentplatform.api.serializers import StrictCharField, StrictInputSerializer, StrictIntegerField
from agentplatform.api.schema import BODY, COMMON, errors
from agentplatform.api.selectors import api_keys_for
from agentplatform.tenancy.credentials import api_key_issue, api_key_revoke
from agentplatform.api.throttling import ApiScopeThrottle
from core.errors import InvalidInputError, NotFoundError
from agentplatform.tenancy.roles import is_platform_operator


@extend_schema_serializer(component_name="ApiKey")
class ApiKeySerializer(serializers.Serializer):
    id = serializers.UUIDField(source="public_id")
    name = serializers.CharField()
    prefix = serializers.CharField(source="token_key", help_text="The key's first characters, to tell keys apart.")
    owner = serializers.CharField(source="user.username")
    created_at = serializers.DateTimeField(source="created")
    expires_at = serializers.DateTimeField(source="expiry", allow_null=True)
    last_used_at = serializers.DateTimeField(allow_null=True)


@extend_schema_serializer(component_name="ApiKeyIssued")
class ApiKeyIssuedSerializer(ApiKeySerializer):
    key = serializers.CharField(help_text="Shown once, now; only its digest is stored.")


class ApiKeyListCreateApi(ApiView):
    """My API keys (a tenant administrator: `?scope=tenant` for every member's), and issuing one."""

    throttle_classes = [ApiScopeThrottle]
    throttle_scope = "api_keys"

    pagination_class = PagePagination

    @extend_schema_serializer(component_name="ApiKeyCreate")
    class InputSerializer(StrictInputSerializer):
        name = StrictCharField(max_length=100)
        expires_in_days = StrictIntegerField(required=False, min_value=0, max_value=settings.API_KEY_MAX_TTL_DAYS,
                                             help_text="Default API_KEY_TTL_DAYS; 0 = never, if allowed; at most "
                                                       "API_KEY_MAX_TTL_DAYS.")
        user = StrictCharField(required=False, max_length=150,
                               help_text="Default: me. Another name only for a service account, by a tenant "
                                         "administrator of its tenant or a platform operator; another person: "
                                         "403 KEY_FOR_ANOTHER_PERSON.")

    @extend_schema(operation_id="api_keys_list", tags=["api-keys"], summary="API keys I may see",
                   parameters=[OpenApiParameter("scope", str, enum=["mine", "tenant"], required=False)],
                   responses={200: ApiKeySerializer(many=True), **errors(*COMMON, 400, 404)})
    def get(self, request: Request) -> Response:
        scope = request.query_params.get("scope", "mine")
        if scope not in ("mine", "tenant"):
            raise InvalidInputError("scope must be one of: mine, tenant")
        whole_tenant = scope == "tenant"
        return paginated_response(self, api_keys_for(user=request.user, whole_tenant=whole_tenant), ApiKeySerializer)

    @extend_schema(operation_id="api_keys_create", tags=["api-keys"], summary="Issue an API key (shown once)",
                   description="The key authenticates `user` (default: me) and is shown once, to the caller. "
                               "Only a service account's key may be issued by someone else (a tenant "
                               "administrator of its tenant, a platform operator); for another person the "
                               "answer is 403 KEY_FOR_ANOTHER_PERSON and nothing is created.",
                   request=InputSerializer, responses={201: ApiKeyIssuedSerializer, **errors(*BODY, *COMMON, 404)})
    def post(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        owner = request.user
        if data.get("user") and data["user"] != request.user.username:
            candidates = get_user_model().objects.filter(username=data["user"])
            if not is_platform_operator(request.user):
                candidates = candidates.filter(tenant_id=request.user.tenant_id) \
                    if request.user.tenant_id is not None else candidates.none()
            owner = candidates.first()
            if owner is None:
                raise NotFoundError("unknown user")
        key, raw = api_key_issue(user=owner, name=data["name"], expires_in_days=data.get("expires_in_days"),
                                 actor=request.user)
        body = ApiKeySerializer(key).data | {"key": raw}
        return Response(body, status=status.HTTP_201_CREATED, headers={"Cache-Control": "no-store"})


class ApiKeyRevokeApi(ApiView):
    """Revoke a key: its owner, a tenant administrator of the owner's tenant, a platform operator."""

    throttle_classes = [ApiScopeThrottle]
    throttle_scope = "api_keys"

    @extend_schema(operation_id="api_keys_revoke", tags=["api-keys"], summary="Revoke an API key",
                   responses={204: None, **errors(*COMMON, 404)})
    def delete(self, request: Request, key_id: uuid.UUID) -> Response:
        api_key_revoke(public_id=key_id, actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)
