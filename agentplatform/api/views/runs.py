"""Runs: GET /api/v1/runs/{id}/ and the Server-Sent Events of GET /api/v1/runs/{id}/events/."""
from __future__ import annotations

import re
import uuid

from django.core.handlers.asgi import ASGIRequest
from django.http import HttpResponse, StreamingHttpResponse
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    extend_schema_serializer,
)
from rest_framework import serializers
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from agentplatform.api.base import ApiView
from agentplatform.api.serializers import StrictCharField, StrictInputSerializer
from agentplatform.api.schema import COMMON, errors
from agentplatform.api.sse import EventStreamRenderer, run_event_stream
from agentplatform.api.sse_hub import run_event_stream_async
from core.errors import InvalidInputError
from agentplatform.api.views.card_serializers import DecisionCardSerializer
from agentplatform.runtime.cards import run_cards
from agentplatform.runtime.models import Run, RunEvent
from agentplatform.runtime.selectors import run_decisions, run_events, run_get, run_pending_requests
from agentplatform.runtime.services import run_cancel
from approvals.models import ConfirmationRequest
from tools.models import RiskLevel

MAX_SEQ = 2**31 - 1
EVENT_ID_SCHEMA = {"type": "integer", "minimum": 0, "maximum": MAX_SEQ}


@extend_schema_serializer(component_name="Run")
class RunSerializer(serializers.Serializer):
    @extend_schema_serializer(component_name="RunPending")
    class PendingSerializer(serializers.Serializer):
        confirmation_id = serializers.UUIDField(source="id")
        tool_call_id = serializers.CharField()
        tool = serializers.CharField(source="tool_name")
        summary = serializers.CharField()
        risk = serializers.ChoiceField(choices=RiskLevel.choices)
        needs = serializers.SerializerMethodField()
        quorum = serializers.IntegerField()
        approvals = serializers.IntegerField(source="approvals_count", help_text="APPROVE decisions so far.")
        status = serializers.ChoiceField(choices=ConfirmationRequest.Status.choices)
        expires_at = serializers.DateTimeField()

        @extend_schema_field(serializers.ChoiceField(choices=[("requester", "requester"), ("approvers", "approvers")]))
        def get_needs(self, request: ConfirmationRequest) -> str:
            return "requester" if request.policy == ConfirmationRequest.Policy.REQUESTER else "approvers"

    @extend_schema_serializer(component_name="RunDecision")
    class DecisionSerializer(serializers.Serializer):
        @extend_schema_serializer(component_name="RunDecider")
        class DeciderSerializer(serializers.Serializer):
            role = serializers.ChoiceField(choices=[("requester", "requester"), ("approver", "approver")])
            username = serializers.CharField()

        @extend_schema_serializer(component_name="RunApprovalDecision")
        class ApprovalSerializer(serializers.Serializer):
            approver = serializers.CharField()
            decision = serializers.ChoiceField(choices=[("APPROVE", "APPROVE"), ("REJECT", "REJECT")])
            comment = serializers.CharField(allow_blank=True)
            at = serializers.DateTimeField()

        confirmation_id = serializers.UUIDField()
        tool_call_id = serializers.CharField(allow_blank=True)
        tool = serializers.CharField()
        summary = serializers.CharField()
        status = serializers.ChoiceField(choices=ConfirmationRequest.Status.choices)
        outcome_code = serializers.CharField(allow_blank=True, help_text=(
            "What happened when it was consumed (OK, a business failure code) or why it was refused."))
        outcome = serializers.ChoiceField(choices=[(o, o) for o in (
            "PENDING", "CONFIRMED", "EXECUTED", "FAILED", "REFUSED", "REJECTED", "CANCELLED", "SUPERSEDED", "EXPIRED",
            "RESPONDED", "WITHDRAWN")],
            help_text="The real ending (approvals' `outcome`): a failed call is FAILED with its code, never EXECUTED.")
        decided_by = DeciderSerializer(allow_null=True, help_text="Who ended it; null: the platform (expiry, ...).")
        reason = serializers.CharField(allow_blank=True, help_text="A rejection's reason, what superseded it, ...")
        approvals = ApprovalSerializer(many=True, help_text="Each approver's decision and comment.")

    id = serializers.UUIDField()
    conversation_id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=Run.Status.choices)
    answer = serializers.CharField(allow_null=True)
    error_code = serializers.CharField(allow_blank=True)
    error_message = serializers.CharField(allow_blank=True)
    iterations = serializers.IntegerField()
    pending = PendingSerializer(many=True, help_text="Calls the run waits for (no tokens here).")
    decisions = DecisionSerializer(many=True, help_text="Every gated call of the run and what humans decided.")
    cards = DecisionCardSerializer(many=True, help_text=(
        "The same calls as the chat draws them: words for people beside the codes (see Conversation.cards)."))
    last_event_seq = serializers.IntegerField(help_text="Sequence number of the newest event (0: none).")
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


@extend_schema_serializer(component_name="RunEventMessage")
class RunEventMessageSerializer(serializers.Serializer):
    """One Server-Sent Event of a run as a client's EventSource reads it (agentplatform.api.sse)."""

    id = serializers.RegexField(r"^[0-9]{1,10}$", help_text="The event's sequence number (send it back as "
                                                            "Last-Event-ID).")
    event = serializers.ChoiceField(choices=RunEvent.Type.choices, help_text="The event type.")
    data = serializers.CharField(help_text="The event's payload: one line of JSON.")


class RunDetailApi(ApiView):
    """One of my runs: status, answer or error, and the calls it waits for."""

    @extend_schema(operation_id="runs_retrieve", tags=["runs"], summary="A run",
                   responses={200: RunSerializer, **errors(*COMMON, 404)})
    def get(self, request: Request, run_id: uuid.UUID) -> Response:
        run = run_get(user=request.user, run_id=run_id)
        last = run_events(run=run).order_by("-seq").values_list("seq", flat=True).first() or 0
        body = {"id": run.pk, "conversation_id": run.conversation_id, "status": run.status,
                "answer": run.final_answer if run.status == Run.Status.COMPLETED and run.final_answer else None,
                "error_code": run.error_code, "error_message": run.error_message, "iterations": run.iterations,
                "pending": run_pending_requests(run=run), "decisions": run_decisions(run=run),
                "cards": run_cards(run=run), "last_event_seq": last,
                "created_at": run.created_at, "updated_at": run.updated_at}
        return Response(RunSerializer(body).data)


class RunCancelApi(ApiView):
    """Cancel a run that has not finished: mine, or (tenant administrators) any of my tenant's.
    Its waiting requests are cancelled with it, audited."""

    @extend_schema_serializer(component_name="RunCancelInput")
    class InputSerializer(StrictInputSerializer):
        reason = StrictCharField(required=False, allow_blank=True, max_length=300)

    @extend_schema(operation_id="runs_cancel", tags=["runs"], summary="Cancel a run",
                   request=InputSerializer, responses={200: RunSerializer, **errors(*COMMON, 400, 404, 409)})
    def post(self, request: Request, run_id: uuid.UUID) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        run_cancel(run_id=run_id, actor=request.user, reason=serializer.validated_data.get("reason", ""))
        run = Run.objects.get(pk=run_id)
        last = run_events(run=run).order_by("-seq").values_list("seq", flat=True).first() or 0
        body = {"id": run.pk, "conversation_id": run.conversation_id, "status": run.status, "answer": None,
                "error_code": run.error_code, "error_message": run.error_message, "iterations": run.iterations,
                "pending": [], "decisions": run_decisions(run=run), "cards": run_cards(run=run),
                "last_event_seq": last,
                "created_at": run.created_at, "updated_at": run.updated_at}
        return Response(RunSerializer(body).data)


EVENT_ID_PATTERN = re.compile(r"[0-9]{1,10}")  # ASCII only: str.isdigit() also takes "²" and "١"


def parse_event_id(raw: str) -> int:
    """An event sequence number as a client sends it back: 1 to 10 ASCII digits, at most MAX_SEQ.

    Raises InvalidInputError (400 INVALID_ARGUMENTS, the code this check always had) otherwise, including for an empty value: a client that sends the field
    says it has seen an event, and no event has an empty id.
    """
    if not EVENT_ID_PATTERN.fullmatch(raw) or int(raw) > MAX_SEQ:
        raise InvalidInputError(f"Last-Event-ID must be an event sequence number: 1 to 10 ASCII digits, "
                             f"at most {MAX_SEQ}")
    return int(raw)


def _last_event_id(request: Request) -> int:
    """The Last-Event-ID header (an EventSource reconnecting), else `?last_event_id=`, else 0.

    Whichever is present is parsed by `parse_event_id`; the header wins when both are sent.
    """
    header = request.headers.get("Last-Event-ID")
    if header is not None:
        return parse_event_id(header.strip(" \t"))  # optional whitespace around an HTTP field value
    query = request.query_params.get("last_event_id")
    if query is not None:
        return parse_event_id(query)
    return 0


class RunEventsApi(ApiView):
    """My run's events as Server-Sent Events, replayed after Last-Event-ID, followed live."""

    renderer_classes = [EventStreamRenderer, JSONRenderer]

    @extend_schema(
        operation_id="runs_events", tags=["runs"], summary="A run's events (Server-Sent Events)",
        description=(
            "`text/event-stream`: one event per RunEvent, `id:` = sequence number, `event:` = type "
            "(MODEL_TEXT, TOOL_CALL_STARTED, CONFIRMATION_REQUIRED, TOOL_EXECUTION_COMPLETED, FINAL_TEXT, "
            "ERROR, DONE), `data:` = JSON payload. Events after Last-Event-ID (header, or `last_event_id` "
            "query parameter for the first connection) are replayed, new ones follow as they are stored; the "
            "stream ends after DONE or after at most 60 s (reconnect with Last-Event-ID). 204 when the run "
            "has finished and nothing is left after Last-Event-ID (an EventSource then stops reconnecting)."),
        parameters=[
            OpenApiParameter("Last-Event-ID", EVENT_ID_SCHEMA, OpenApiParameter.HEADER, required=False,
                             description=("Sequence number of the last event received: 1 to 10 ASCII digits, at "
                                          f"most {MAX_SEQ}. Anything else, an empty value included, is 400.")),
            OpenApiParameter("last_event_id", EVENT_ID_SCHEMA, OpenApiParameter.QUERY, required=False,
                             description="Same as the header (which wins), for clients that cannot set headers."),
            OpenApiParameter("format", exclude=True),
        ],
        responses={
            (200, "text/event-stream"): OpenApiResponse(RunEventMessageSerializer, description=(
                "The event stream; the schema describes one event (Open API before 3.2 reads `schema` of an "
                "event stream so).")),
            204: OpenApiResponse(description="The run finished and no event is left to send."),
            **errors(400, *COMMON, 404),
        },
    )
    def get(self, request: Request, run_id: uuid.UUID):
        run = run_get(user=request.user, run_id=run_id)
        after = _last_event_id(request)
        if run.is_finished and not run_events(run=run, after_seq=after).exists():
            done = HttpResponse(status=204)
            del done["Content-Type"]  # no body, so no media type (Django would say text/html)
            return done
        if isinstance(request._request, ASGIRequest):
            # The production server: an async stream fed by the process's hub (no thread, no
            # connection per stream; agentplatform/api/sse_hub.py).
            body = run_event_stream_async(run_id=run.pk, after_seq=after)
        else:
            body = run_event_stream(run=run, after_seq=after)  # WSGI (runserver, test client): polls
        response = StreamingHttpResponse(body, content_type="text/event-stream; charset=utf-8")
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"  # nginx: pass each event through at once
        return response
