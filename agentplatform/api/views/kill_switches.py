"""The kill switch (policies.kill_switch): POST /api/v1/tools/{name}/stop/ and .../release/,
GET /api/v1/kill-switches/ and POST /api/v1/kill-switches/{id}/release/.

Who may act is read from the server's record of the caller (agentplatform.tenancy.roles): a
tenant administrator stops and releases a tool in their own tenant; a platform operator in every
tenant (no `tenant`) or in the one named. Anyone else: 403 PERMISSION_DENIED. Another tenant's
stop, or another tenant named by a tenant administrator, is 404 NOT_FOUND.
"""
from __future__ import annotations

import uuid

from django.db.models import Q
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from agentplatform.api.base import ApiView
from agentplatform.api.pagination import PagePagination, paginated_response
from agentplatform.api.schema import BODY, COMMON, errors
from agentplatform.api.serializers import StrictCharField, StrictInputSerializer
from agentplatform.tenancy.models import Tenant
from agentplatform.tenancy.roles import PLATFORM_OPERATOR, admin_role
from core.errors import InvalidInputError, NotFoundError, PermissionDeniedError
from policies.kill_switch import (REASON_MAX, kill_switch_engage, kill_switch_release, kill_switch_release_tool,
                                  visible_stops)
from policies.models import KillSwitch
from tools.models import Tool

TOOL_NAME_PATTERN = r"^[A-Za-z0-9_.\-]{1,128}$"
TOOL_PATH = OpenApiParameter("name", {"type": "string", "pattern": TOOL_NAME_PATTERN, "maxLength": 128},
                             OpenApiParameter.PATH, description="The tool's name, as GET /api/v1/tools/ lists it.")
STOP_ERRORS = (
    "400 INVALID_ARGUMENTS (reason missing, blank or over 500 characters), 400 UNKNOWN_TOOL (no such tool "
    "here), 403 PERMISSION_DENIED (not a tenant administrator or platform operator, or a tenant "
    "administrator releasing a platform operator's stop of every tenant), 404 NOT_FOUND (another tenant), "
    "409 TOOL_ALREADY_STOPPED / TOOL_NOT_STOPPED.")


class UnknownTool(InvalidInputError):
    """No tool of that name exists where the stop would apply. HTTP 400."""

    code = "UNKNOWN_TOOL"


@extend_schema_serializer(component_name="KillSwitch")
class KillSwitchSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    tool = serializers.CharField(source="tool_name")
    scope = serializers.SerializerMethodField(help_text='"tenant" (one tenant) or "platform" (every tenant).')
    tenant = serializers.SerializerMethodField(help_text="The tenant's slug; null for a stop of every tenant.")
    active = serializers.BooleanField(help_text="True while the stop is in force.")
    reason = serializers.CharField()
    engaged_by = serializers.SerializerMethodField()
    engaged_at = serializers.DateTimeField()
    released_by = serializers.SerializerMethodField()
    released_at = serializers.DateTimeField(allow_null=True)
    release_reason = serializers.CharField()

    def get_scope(self, obj: KillSwitch) -> str:
        return "tenant" if obj.tenant_id is not None else "platform"

    def get_tenant(self, obj: KillSwitch) -> str | None:
        return obj.tenant.slug if obj.tenant_id is not None else None

    def get_engaged_by(self, obj: KillSwitch) -> str | None:
        return obj.engaged_by.get_username() if obj.engaged_by_id else None

    def get_released_by(self, obj: KillSwitch) -> str | None:
        return obj.released_by.get_username() if obj.released_by_id else None


@extend_schema_serializer(component_name="KillSwitchEngaged")
class EngagedSerializer(KillSwitchSerializer):
    cancelled_requests = serializers.IntegerField(
        help_text="How many requests of the tool still to run (pending or confirmed) the stop cancelled.")


@extend_schema_serializer(component_name="KillSwitchInput")
class KillSwitchInput(StrictInputSerializer):
    reason = StrictCharField(max_length=REASON_MAX, help_text="Why: the model and the requesters read it.")
    tenant = StrictCharField(required=False, max_length=64, help_text=(
        "Platform operators: the slug of the one tenant concerned; without it, every tenant. A tenant "
        "administrator always acts for their own tenant (another tenant's slug: 404)."))


@extend_schema_serializer(component_name="KillSwitchReleaseInput")
class ReleaseInput(StrictInputSerializer):
    reason = StrictCharField(max_length=REASON_MAX, help_text="Why the stop is lifted.")


def _tenant_id(request: Request, slug: str | None) -> int | None:
    """The tenant named by `slug` (None when absent), as the caller may see it: 404 otherwise."""
    if slug is None:
        return None
    tenant = Tenant.objects.filter(slug=slug).values_list("pk", flat=True).first()
    role = admin_role(request.user)
    if tenant is None or (role != PLATFORM_OPERATOR and tenant != getattr(request.user, "tenant_id", None)):
        raise NotFoundError("no such tenant")
    return tenant


def _administrator(request: Request) -> None:
    if admin_role(request.user) is None:
        raise PermissionDeniedError("only a tenant administrator or a platform operator may stop or release a tool")


def _input(request: Request, serializer_class: type = KillSwitchInput) -> tuple[str, int | None]:
    _administrator(request)
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    data = serializer.validated_data
    return data["reason"], _tenant_id(request, data.get("tenant"))


def _check_tool(request: Request, name: str, tenant_id: int | None) -> None:
    """UnknownTool unless a tool `name` exists where the stop applies: a shared tool, or one of the
    tenant's own remote servers (for a stop of every tenant: any tool)."""
    tenant_id = tenant_id if tenant_id is not None else (
        None if admin_role(request.user) == PLATFORM_OPERATOR else request.user.tenant_id)
    tools = Tool.objects.filter(name=name)
    if tenant_id is not None:
        tools = tools.filter(Q(tenant__isnull=True) | Q(tenant_id=tenant_id))
    if not tools.exists():
        raise UnknownTool(f"no tool named {name[:128]!r} here")


def _stop(stop_id: uuid.UUID) -> KillSwitch:
    return KillSwitch.objects.select_related("tenant", "engaged_by", "released_by").get(pk=stop_id)


class ToolStopApi(ApiView):
    """Stop a tool (the kill switch)."""

    @extend_schema(operation_id="tools_stop", tags=["kill-switches"], summary="Stop a tool (kill switch)",
                   description=(
                       "New calls of the tool are denied with TOOL_STOPPED and the reason (the model reads it); "
                       "its requests still to run in scope (pending or confirmed) are cancelled with the reason, "
                       "and a decision of it is refused when it would run. Audited. " + STOP_ERRORS),
                   parameters=[TOOL_PATH], request=KillSwitchInput,
                   responses={201: EngagedSerializer, **errors(*BODY, *COMMON, 404, 409)})
    def post(self, request: Request, name: str) -> Response:
        reason, tenant_id = _input(request)
        _check_tool(request, name, tenant_id)
        engaged = kill_switch_engage(tool_name=name, actor=request.user, reason=reason, tenant_id=tenant_id)
        body = KillSwitchSerializer(_stop(engaged.stop.pk)).data | {"cancelled_requests": len(engaged.cancelled)}
        return Response(body, status=status.HTTP_201_CREATED)


class ToolReleaseApi(ApiView):
    """Release the stop of a tool in force in my scope."""

    @extend_schema(operation_id="tools_release", tags=["kill-switches"], summary="Release a stopped tool",
                   description=("Lifts the stop in force in the caller's scope (a tenant administrator: their "
                                "tenant's; a platform operator: the stop of every tenant, or of the tenant named). "
                                "Requests it cancelled stay cancelled. Audited. " + STOP_ERRORS),
                   parameters=[TOOL_PATH], request=KillSwitchInput,
                   responses={200: KillSwitchSerializer, **errors(*BODY, *COMMON, 404, 409)})
    def post(self, request: Request, name: str) -> Response:
        reason, tenant_id = _input(request)
        stop = kill_switch_release_tool(tool_name=name, actor=request.user, reason=reason, tenant_id=tenant_id)
        return Response(KillSwitchSerializer(_stop(stop.pk)).data)


class KillSwitchListApi(ApiView):
    """The stops I may see: a tenant administrator their tenant's and those of every tenant; a
    platform operator all. Newest first."""

    pagination_class = PagePagination

    @extend_schema(operation_id="kill_switches_list", tags=["kill-switches"], summary="Tool stops",
                   parameters=[OpenApiParameter("active", str, enum=["true", "false"], required=False,
                                                description="Only the stops in force (true) or released (false)."),
                               OpenApiParameter("tool", {"type": "string", "pattern": TOOL_NAME_PATTERN,
                                                         "maxLength": 128}, required=False)],
                   responses={200: KillSwitchSerializer(many=True), **errors(*COMMON, 400, 404)})
    def get(self, request: Request) -> Response:
        _administrator(request)
        stops = visible_stops(request.user)
        active = request.query_params.get("active")
        if active is not None:
            if active not in ("true", "false"):
                raise InvalidInputError("active must be true or false")
            stops = stops.filter(released_at__isnull=active == "true")
        tool = request.query_params.get("tool")
        if tool is not None:
            if not 0 < len(tool) <= 128:
                raise InvalidInputError("tool must be a tool's name")
            stops = stops.filter(tool_name=tool)
        return paginated_response(self, stops, KillSwitchSerializer)


class KillSwitchReleaseApi(ApiView):
    """Release one stop by its id."""

    @extend_schema(operation_id="kill_switches_release", tags=["kill-switches"], summary="Release a tool stop",
                   description="Lifts this stop. Another tenant's stop is 404. Audited. " + STOP_ERRORS,
                   request=ReleaseInput, responses={200: KillSwitchSerializer, **errors(*BODY, *COMMON, 404, 409)})
    def post(self, request: Request, stop_id: uuid.UUID) -> Response:
        reason, _ = _input(request, ReleaseInput)
        stop = kill_switch_release(stop_id=stop_id, actor=request.user, reason=reason)
        return Response(KillSwitchSerializer(_stop(stop.pk)).data)
