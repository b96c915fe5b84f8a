"""GET /api/v1/audit-events/: the tenant's audit trail, filtered, paginated or exported."""
from __future__ import annotations

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request

from core import clock
from agentplatform.api.base import ApiView
from agentplatform.api.pagination import StrictCursorPagination, UniqueKeyCursorPagination
from agentplatform.api.serializers import StrictCharField, StrictDateTimeField, query_values
from core.errors import InvalidInputError
from agentplatform.api.exports import CSVRenderer, JSONLinesRenderer, csv_lines, event_row, jsonl_lines
from agentplatform.api.schema import COMMON, errors
from audit.models import AuditEvent
from audit.selectors import audit_events_for

EXPORT_PERMISSION = "audit.export_auditevent"
EXPORT_FORMATS = ("json", "jsonl", "csv")


class CanReadAudit(BasePermission):
    """Holds `audit.export_auditevent` (a user or group grant; superusers hold every permission)."""

    message = "reading the audit trail needs the audit.export_auditevent permission"

    def has_permission(self, request, view) -> bool:
        return bool(request.user.has_perm(EXPORT_PERMISSION))


class AuditCursorPagination(UniqueKeyCursorPagination, StrictCursorPagination):
    """Newest first by the tenant's chain position (unique per tenant; the list is always one
    tenant's); `?cursor=` from `next`/`previous` (a cursor the server did not issue is 400
    INVALID_CURSOR); `?page_size=` up to 500."""

    ordering = ("-chain_seq",)
    unique_within = "tenant"
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


@extend_schema_serializer(component_name="AuditEvent")
class AuditEventSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    occurred_at = serializers.DateTimeField()
    actor = serializers.CharField(allow_null=True, help_text="Username; null for the system (expiry).")
    tool_name = serializers.CharField(allow_blank=True)
    tool_owner = serializers.CharField(allow_blank=True)
    tool_version = serializers.CharField(allow_blank=True)
    decision = serializers.ChoiceField(choices=AuditEvent.Decision.choices)
    policy_decision = serializers.CharField(allow_blank=True)
    status = serializers.CharField(allow_blank=True, help_text="The stable result code.")
    request_id = serializers.CharField(allow_blank=True)
    conversation_id = serializers.UUIDField(allow_null=True)
    run_id = serializers.UUIDField(allow_null=True)
    tool_call_id = serializers.CharField(allow_blank=True)
    arguments_hash = serializers.CharField(allow_blank=True)
    masked_arguments = serializers.JSONField(allow_null=True)
    confirmation_id = serializers.UUIDField(allow_null=True)
    idempotency_key = serializers.CharField(allow_blank=True)
    business_result_id = serializers.CharField(allow_blank=True)
    duration_ms = serializers.FloatField(allow_null=True)
    message = serializers.CharField(allow_blank=True)
    channel = serializers.JSONField(allow_null=True, help_text=(
        'How the call arrived when not through the platform\'s own chat: {"name": "mcp", "api_key": <key name>, '
        '"api_key_id", "client"}; null otherwise.'))


class AuditEventListApi(ApiView):
    """The audit trail of my tenant for holders of `audit.export_auditevent` (403 otherwise).

    JSON: newest first, cursor-paginated. `?format=jsonl` / `?format=csv` (or the matching Accept
    header): the whole filtered trail in chain order (oldest first), streamed as a download, with
    the chain columns so the file can be checked offline (audit.export, docs/audit.md).
    """

    permission_classes = [IsAuthenticated, CanReadAudit]
    renderer_classes = [JSONRenderer, JSONLinesRenderer, CSVRenderer]
    pagination_class = AuditCursorPagination

    @extend_schema_serializer(component_name="AuditEventFilter")
    class FilterSerializer(serializers.Serializer):
        tool = StrictCharField(required=False, max_length=100, help_text="Tool name.")
        user = StrictCharField(required=False, max_length=150, help_text="Actor's username.")
        status = StrictCharField(required=False, max_length=64, help_text="Result code, e.g. CONFIRMATION_REQUIRED.")
        decision = serializers.ChoiceField(required=False, choices=AuditEvent.Decision.choices)
        kind = serializers.ChoiceField(required=False, choices=[("control", "control"), ("tool", "tool")],
                                       help_text="control: control-plane changes (decision CONTROL_CHANGE: "
                                                 "whitelist, overrides, grants, members, roles, API keys); "
                                                 "tool: every other event.")
        object_type = StrictCharField(required=False, max_length=64,
                                      help_text="Control-plane object type (masked_arguments.object.type).")
        object = StrictCharField(required=False, max_length=128,
                                 help_text="What the rows are about, e.g. an order id: every row about it.")
        from_ = StrictDateTimeField(required=False, help_text="Occurred at or after (ISO 8601 date-time).")
        to = StrictDateTimeField(required=False, help_text="Occurred before (ISO 8601 date-time).")

        def get_fields(self):
            fields = super().get_fields()
            fields["from"] = fields.pop("from_")  # `from` is a Python keyword
            return fields

        def validate(self, attrs):
            if attrs.get("from") and attrs.get("to") and attrs["from"] >= attrs["to"]:
                raise serializers.ValidationError({"to": ["must be after from"]})
            return attrs

    def perform_content_negotiation(self, request: Request, force: bool = False):
        # `?format=` as the schema states it: one of the renderers' formats (DRF would ignore an
        # empty value and answer 404 to an unknown one)
        if not force and "format" in request.query_params and request.query_params["format"] not in EXPORT_FORMATS:
            raise InvalidInputError(f"format must be one of {', '.join(EXPORT_FORMATS)}")
        return super().perform_content_negotiation(request, force)

    @extend_schema(
        operation_id="audit_events_list", tags=["audit"], summary="The audit trail (filter, page, export)",
        parameters=[FilterSerializer,
                    OpenApiParameter("format", OpenApiTypes.STR, OpenApiParameter.QUERY, required=False,
                                     enum=list(EXPORT_FORMATS),
                                     description="json (paginated, default), jsonl or csv (streamed download).")],
        responses={
            (200, "application/json"): AuditEventSerializer(many=True),
            (200, "application/x-ndjson"): OpenApiResponse(OpenApiTypes.STR, description="One event per line."),
            (200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, description="Header line, then one event per line."),
            **errors(400, *COMMON, 404),
        },
    )
    def get(self, request: Request):
        filters = self.FilterSerializer(data=query_values(request))
        filters.is_valid(raise_exception=True)
        f = filters.validated_data
        rows = audit_events_for(tenant_id=request.user.tenant_id, tool=f.get("tool"), username=f.get("user"),
                                status=f.get("status"), decision=f.get("decision"),
                                occurred_from=f.get("from"), occurred_to=f.get("to"), kind=f.get("kind"),
                                object_type=f.get("object_type"), business_object=f.get("object"))
        export = request.accepted_renderer.format
        if export in ("jsonl", "csv"):
            # the list's own parameters are checked in every format (an export ignores them)
            paginator = self.pagination_class()
            paginator._model = AuditEvent
            paginator.get_page_size(request)
            paginator.decode_cursor(request)
            lines = jsonl_lines(rows) if export == "jsonl" else csv_lines(rows)
            content_type = f"{request.accepted_renderer.media_type}; charset=utf-8"
            response = StreamingHttpResponse(lines, content_type=content_type)
            stamp = clock.now().strftime("%Y%m%dT%H%M%SZ")
            response["Content-Disposition"] = f'attachment; filename="audit-{stamp}.{export}"'
            return response
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(rows, request, view=self)
        return paginator.get_paginated_response(AuditEventSerializer([event_row(e) for e in page], many=True).data)
