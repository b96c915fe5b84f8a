"""POST /api/v1/chat/: one chat turn, blocking or (`Prefer: respond-async`) answered at once with
202 and the run to follow; honouring an Idempotency-Key header."""
from __future__ import annotations

import logging
import re
from typing import Callable

from django.db import DatabaseError, connection
from django.urls import reverse
from drf_spectacular.utils import OpenApiExample, extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from core import correlation
from agentplatform.api.base import ApiView
from agentplatform.api.idempotency import (
    http_idempotency_claim,
    http_idempotency_complete,
    http_idempotency_release,
    parse_idempotency_key,
    request_fingerprint,
)
from agentplatform.api.schema import BODY, COMMON, errors
from agentplatform.api.throttling import ApiScopeThrottle
from agentplatform.api.views.chat_serializers import (
    IDEMPOTENCY_KEY,
    PREFER,
    REQUEST_ID,
    AcceptedSerializer,
    ChatInputSerializer,
    PendingSerializer,
    outcome_body,
    without_tokens,
)
from core.errors import PermissionDeniedError
from agentplatform.runtime.models import Run
from agentplatform.runtime.services import chat_send, chat_start

logger = logging.getLogger(__name__)

REQUEST_ID_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,64}")


def request_id_of(request: Request) -> str:
    """The client's X-Request-ID when it is a plain token, else "" (the run then makes its own)."""
    value = request.headers.get("X-Request-ID", "").strip()
    return value if REQUEST_ID_PATTERN.fullmatch(value) else ""


def prefers_async(request: Request) -> bool:
    """True when the Prefer header (RFC 7240) asks for respond-async."""
    prefer = request.headers.get("Prefer", "")
    return any(part.split(";")[0].strip().lower() == "respond-async" for part in prefer.split(","))


class ChatApi(ApiView):
    """Send a message and wait for the run to answer, wait for a confirmation, or fail.

    With `confirmation_token` (and the `conversation_id` it belongs to), confirm that pending
    call and resume its run instead: the token is the requester's confirmation. A tool the model
    proposed that I may not use answers 403 PERMISSION_DENIED (the run is stored as FAILED).
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
            "The tool calls this run answered, in order: {id, type: function, function: {name, arguments "
            "(JSON text, masked; an approver's edit: what ran)}, success, code}; success is true when the "
            "call ran and succeeded, code is OK, a business failure or a refusal (e.g. REJECTED). Calls still "
            "waiting are in `pending`. Without internal tool execution: the proposed calls handed to you "
            "(OpenAI wire format)."))

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
            raise PermissionDeniedError("a user without a tenant cannot chat")
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
