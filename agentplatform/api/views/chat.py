"""POST /api/v1/chat/: one chat turn, blocking or (`Prefer: respond-async`) answered at once with
202 and the run to follow; honouring an Idempotency-Key header."""
from __future__ import annotations

import logging
import re
from typing import Any, Callable

from django.db import DatabaseError, connection
from django.urls import reverse
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from agentplatform import correlation
from agentplatform.api.base import ApiView, StrictCharField, StrictUUIDField, StrictInputSerializer
from agentplatform.api.idempotency import (
    IDEMPOTENCY_KEY_PATTERN,
    MAX_KEY_LENGTH,
    http_idempotency_claim,
    http_idempotency_complete,
    http_idempotency_release,
    parse_idempotency_key,
    request_fingerprint,
)
from agentplatform.api.schema import BODY, COMMON, NON_BLANK_PATTERN, errors
from agentplatform.api.throttling import ApiScopeThrottle
from agentplatform.errors import RETRYABLE_RUN_ERRORS, PermissionDenied
from agentplatform.runtime.outcome import RunOutcome
from agentplatform.runtime.models import Run
from agentplatform.runtime.services import MAX_MESSAGE_CHARS, chat_send, chat_start
from tools.models import RiskLevel

IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key", {"type": "string", "minLength": 1, "maxLength": MAX_KEY_LENGTH,
                        "pattern": IDEMPOTENCY_KEY_PATTERN},
    OpenApiParameter.HEADER, required=False,
    description=("1 to 255 printable ASCII characters, not only spaces (else 400 INVALID_ARGUMENTS); a quoted "
                 "Structured Field String names the same key as its content. "
                 "Makes the POST safe to retry (IETF httpapi Idempotency-Key draft), scoped to you; kept 24 h. "
                 "Same key and body: the stored response is replayed (header `Idempotent-Replayed: true`; "
                 "tokens are not replayed, get a fresh one from /confirmations/{id}/token/). Same key, other "
                 "body: 422. First request still running: 409 IN_PROGRESS."))

logger = logging.getLogger(__name__)

REQUEST_ID = OpenApiParameter(
    "X-Request-ID", OpenApiTypes.STR, OpenApiParameter.HEADER, required=False,
    description="Your correlation id (up to 64 of A-Z a-z 0-9 . _ : -), recorded on the run and its audit rows.")
PREFER = OpenApiParameter(
    "Prefer", OpenApiTypes.STR, OpenApiParameter.HEADER, required=False,
    description=("`respond-async` (RFC 7240): answer 202 at once with the run id and its events URL; the run "
                 "continues in a worker (or a background thread without a broker). Follow it with "
                 "GET /runs/{id}/events/ (Server-Sent Events) or GET /runs/{id}/. Honoured for messages; a "
                 "request with `confirmation_token` is answered in the blocking form. The answer then carries "
                 "`Preference-Applied: respond-async`."))
REQUEST_ID_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,64}")


def request_id_of(request: Request) -> str:
    """The client's X-Request-ID when it is a plain token, else "" (the run then makes its own)."""
    value = request.headers.get("X-Request-ID", "").strip()
    return value if REQUEST_ID_PATTERN.fullmatch(value) else ""


@extend_schema_serializer(component_name="PendingConfirmation")
class PendingSerializer(serializers.Serializer):
    confirmation_id = serializers.UUIDField()
    tool_call_id = serializers.CharField()
    tool = serializers.CharField()
    summary = serializers.CharField(help_text="What will run, in words a person checks.")
    risk = serializers.ChoiceField(choices=RiskLevel.choices)
    needs = serializers.ChoiceField(choices=[("requester", "requester"), ("approvers", "approvers")])
    quorum = serializers.IntegerField()
    expires_at = serializers.DateTimeField()
    facts = serializers.JSONField(required=False, help_text=(
        "The tool's approval context captured with the request (masked, tenant-scoped): e.g. order total, status, "
        "already refunded, the amount a full refund refunds. Money values are {amount, currency, display}."))
    written_by_assistant = serializers.DictField(child=serializers.CharField(), required=False, help_text=(
        "Free-text arguments in the model's own words (argument -> text): not the platform's words; show them "
        "quoted and labelled."))
    reason = serializers.CharField(required=False, help_text=(
        "Only when a confirmed or approved call waits again because its policy became stricter: why, in "
        "English / Chinese."))
    regated = serializers.DictField(required=False, help_text=(
        'Only then too: {"cause": APPROVERS_NOW | QUORUM_RAISED | APPROVALS_LAPSED, "tool", "quorum", '
        '"approvals" (that still count), "message", "message_zh"}.'))
    token = serializers.CharField(allow_null=True, help_text=(
        "One-time confirmation token, only for my own requester-confirmed calls, shown once. "
        "Send it to /confirmations/confirm/ or back to /chat/ as confirmation_token."))


def outcome_body(outcome: RunOutcome) -> dict[str, Any]:
    """The chat response body of a RunOutcome (tokens included, as the service returned them)."""
    run = outcome.run
    return {
        "conversation_id": run.conversation_id,
        "run_id": run.pk,
        "status": run.status,
        "answer": run.final_answer if run.status == Run.Status.COMPLETED and run.final_answer else None,
        "error": ({"code": run.error_code, "message": run.error_message,
                   "retryable": run.error_code in RETRYABLE_RUN_ERRORS}
                  if run.status in (Run.Status.FAILED, Run.Status.CANCELLED) else None),
        "pending": [{**p.public(), "token": p.token} for p in outcome.pending],
        "tool_calls": outcome.tool_calls,
    }


def prefers_async(request: Request) -> bool:
    """True when the Prefer header (RFC 7240) asks for respond-async."""
    prefer = request.headers.get("Prefer", "")
    return any(part.split(";")[0].strip().lower() == "respond-async" for part in prefer.split(","))


@extend_schema_serializer(component_name="ChatAccepted")
class AcceptedSerializer(serializers.Serializer):
    conversation_id = serializers.UUIDField()
    run_id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=Run.Status.choices, help_text="RUNNING: the run was started.")
    run_url = serializers.CharField(help_text="GET it for the run's status, answer or pending calls.")
    events_url = serializers.CharField(help_text="Its Server-Sent Events (text/event-stream), from the first event.")


def without_tokens(body: Any) -> Any:
    """`body` with every pending token replaced by None: what may be stored for a replay."""
    if isinstance(body, dict) and isinstance(body.get("pending"), list):
        return {**body, "pending": [{**p, "token": None} for p in body["pending"]]}
    return body


class ChatRequestExtension(OpenApiSerializerExtension):
    """The chat request's cross-field rule, which drf-spectacular cannot read from `validate()`:
    either a non-blank `message` without a token, or a `confirmation_token` with the
    `conversation_id` it belongs to (any `message` then)."""

    target_class = "agentplatform.api.views.chat.ChatInputSerializer"

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_basic_serializer(self.target, direction)
        token = {"type": "string"}
        schema["anyOf"] = [
            {"title": "message", "required": ["message"],
             "properties": {"message": {"type": "string", "pattern": NON_BLANK_PATTERN}},
             "not": {"required": ["confirmation_token"], "properties": {"confirmation_token": token}}},
            {"title": "confirmation", "required": ["confirmation_token", "conversation_id"],
             "properties": {"confirmation_token": token, "conversation_id": {"type": "string", "format": "uuid"}}},
        ]
        return schema


@extend_schema_serializer(component_name="ChatRequest")
class ChatInputSerializer(StrictInputSerializer):
    """A message, or a confirmation token with its conversation (rule: ChatRequestExtension)."""

    body_required = True  # an empty body is 400: one of the two shapes is needed

    conversation_id = StrictUUIDField(required=False, allow_null=True,
                                      help_text="Omit to start a new conversation; required with confirmation_token.")
    message = StrictCharField(required=False, allow_blank=True, trim_whitespace=False, max_length=MAX_MESSAGE_CHARS,
                              help_text="Required and not blank unless confirmation_token is given.")
    confirmation_token = StrictCharField(required=False, allow_null=True, max_length=200, help_text=(
        "A one-time token from a pending call: confirms it and resumes its run."))

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs.get("confirmation_token"):
            if not attrs.get("conversation_id"):
                raise serializers.ValidationError(
                    {"conversation_id": ["a confirmation token needs the conversation_id it belongs to"]})
        elif not (attrs.get("message") or "").strip():
            raise serializers.ValidationError({"message": ["message must be a non-blank string"]})
        return attrs


class ChatApi(ApiView):
    """Send a message and wait for the run to answer, wait for a confirmation, or fail.

    With `confirmation_token` (and the `conversation_id` it belongs to), confirm that pending
    call and resume its run instead (seed 002 section 25). A tool the model proposed that I may
    not use answers 403 PERMISSION_DENIED (the run is stored as FAILED).
    """

    throttle_classes = [ApiScopeThrottle]
    throttle_scope = "chat"

    InputSerializer = ChatInputSerializer

    @extend_schema_serializer(component_name="ChatResponse")
    class OutputSerializer(serializers.Serializer):
        @extend_schema_serializer(component_name="RunError")
        class ErrorSerializer(serializers.Serializer):
            code = serializers.CharField()
            message = serializers.CharField()
            retryable = serializers.BooleanField(help_text=(
                "A provider outage or timeout: sending the same request again may succeed (its "
                "Idempotency-Key is not kept)."))

        conversation_id = serializers.UUIDField()
        run_id = serializers.UUIDField()
        status = serializers.ChoiceField(choices=Run.Status.choices)
        answer = serializers.CharField(allow_null=True, help_text="The final answer when COMPLETED.")
        error = ErrorSerializer(allow_null=True, help_text="Why the run FAILED.")
        pending = PendingSerializer(many=True, help_text="Calls waiting for a human (AWAITING_CONFIRMATION).")
        tool_calls = serializers.ListField(child=serializers.JSONField(), help_text=(
            "Proposed calls handed to the caller when the agent runs without internal tool execution."))

    @extend_schema(
        operation_id="chat_send", tags=["chat"], summary="Send a message (or a confirmation token)",
        request=InputSerializer, parameters=[IDEMPOTENCY_KEY, REQUEST_ID, PREFER],
        examples=[
            OpenApiExample("A question", value={"message": "How many SKU-10001 are in stock?"}, request_only=True),
            OpenApiExample("A gated call", request_only=True, value={
                "message": "Please cancel order A202607290001 because it is late"}),
            OpenApiExample("Confirming a pending call", request_only=True, value={
                "conversation_id": "3fa85f64-5717-4562-b3fc-2c963f66afa6", "confirmation_token": "<token>"}),
        ],
        responses={200: OutputSerializer, 202: AcceptedSerializer,
                   **errors(*BODY, *COMMON, 404, 409, 410, 422, 503)},
    )
    def post(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        key = parse_idempotency_key(request.headers.get("Idempotency-Key"))
        if request.user.tenant_id is None:
            raise PermissionDenied("a user without a tenant cannot chat")
        data = serializer.validated_data

        def start() -> Response:
            run = chat_start(user=request.user, message=data.get("message") or "",
                             conversation_id=data.get("conversation_id"),
                             request_id=correlation.request_id() or request_id_of(request))
            run_url = reverse("api:run", kwargs={"run_id": run.pk})
            body = {"conversation_id": run.conversation_id, "run_id": run.pk, "status": run.status,
                    "run_url": run_url, "events_url": reverse("api:run-events", kwargs={"run_id": run.pk})}
            return Response(AcceptedSerializer(body).data, status=202,
                            headers={"Location": run_url, "Preference-Applied": "respond-async"})

        def send() -> Response:
            outcome = chat_send(user=request.user, message=data.get("message") or "",
                                conversation_id=data.get("conversation_id"),
                                confirmation_token=data.get("confirmation_token") or None,
                                request_id=correlation.request_id() or request_id_of(request))
            return Response(self.OutputSerializer(outcome_body(outcome)).data)

        handler = start if prefers_async(request) and not data.get("confirmation_token") else send
        if key is None:
            return handler()
        return self._once(request, key, handler)

    def _once(self, request: Request, key: str, handler: Callable[[], Response]) -> Response:
        """Run `handler` at most once per (tenant, user, key); replay its stored response after.

        Called after the body validated (an invalid body claims no key). Stored: every answer below
        500 that is not retryable, success and final errors alike, with tokens removed. Released
        (a retry runs again): server errors and retryable errors.
        """
        fingerprint = request_fingerprint(method=request.method, path=request.path, body=request.data)
        claim = http_idempotency_claim(user=request.user, key=key, fingerprint=fingerprint)
        if claim.replay:
            return Response(claim.record.response_body, status=claim.record.response_status,
                            headers={"Idempotent-Replayed": "true"})
        try:
            try:
                response = handler()
            except Exception as exc:  # noqa: BLE001 - turned into the stored error response below
                response = self.handle_exception(exc)  # re-raises what has no error body (a 500)
        except BaseException:
            _release(claim.record)
            raise
        data = response.data
        run_id = correlation.current_run_id()
        if response.status_code >= 400 and run_id is not None and isinstance(data, dict) and "code" in data:
            # What finalize_response adds to the live answer: the replay answers the same body.
            data.setdefault("run_id", str(run_id))
        retryable = isinstance(data, dict) and (
            data.get("retryable") is True
            # a run that FAILED for a retryable reason (model outage) is not the key's final answer
            or (isinstance(data.get("error"), dict) and data["error"].get("retryable") is True))
        if response.status_code >= 500 or retryable:
            _release(claim.record)
        else:
            http_idempotency_complete(record=claim.record, status_code=response.status_code,
                                      body=without_tokens(data))
        return response


def _release(record) -> None:
    """Release an unanswered Idempotency-Key claim. When the database connection itself broke
    (the usual reason to be here), reconnect once: a claim left PROCESSING would answer 409
    IN_PROGRESS to every retry until its lease ran out."""
    try:
        http_idempotency_release(record=record)
    except DatabaseError:
        connection.close()
        try:
            http_idempotency_release(record=record)
        except DatabaseError:
            logger.exception("could not release Idempotency-Key claim %s; it frees itself after its lease", record.pk)
