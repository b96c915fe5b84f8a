"""What POST /api/v1/chat/ reads and answers: its headers, request and response serializers (with
the schema rules drf-spectacular cannot infer), and the response bodies built from a run."""
from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema_serializer
from rest_framework import serializers

from agentplatform.api.idempotency import IDEMPOTENCY_KEY_PATTERN, MAX_KEY_LENGTH
from agentplatform.api.schema import NON_BLANK_PATTERN
from agentplatform.api.serializers import StrictCharField, StrictInputSerializer, StrictUUIDField
from core.errors import RETRYABLE_RUN_ERRORS
from agentplatform.runtime.outcome import RunOutcome
from agentplatform.runtime.models import Run
from agentplatform.runtime.ran_calls import run_answered_calls
from agentplatform.runtime.services import MAX_MESSAGE_CHARS
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


@extend_schema_serializer(component_name="ChatAccepted")
class AcceptedSerializer(serializers.Serializer):
    conversation_id = serializers.UUIDField()
    run_id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=Run.Status.choices, help_text="RUNNING: the run was started.")
    run_url = serializers.CharField(help_text="GET it for the run's status, answer or pending calls.")
    events_url = serializers.CharField(help_text="Its Server-Sent Events (text/event-stream), from the first event.")


class ChatRequestExtension(OpenApiSerializerExtension):
    """The chat request's cross-field rule, which drf-spectacular cannot read from `validate()`:
    either a non-blank `message` without a token, or a `confirmation_token` with the
    `conversation_id` it belongs to (any `message` then)."""

    target_class = "agentplatform.api.views.chat_serializers.ChatInputSerializer"

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
        # User-controlled execution hands the proposed calls back; otherwise: what the run answered.
        "tool_calls": outcome.tool_calls or run_answered_calls(run=run),
    }


def without_tokens(body: Any) -> Any:
    """`body` with every pending token replaced by None: what may be stored for a replay."""
    if isinstance(body, dict) and isinstance(body.get("pending"), list):
        return {**body, "pending": [{**p, "token": None} for p in body["pending"]]}
    return body
