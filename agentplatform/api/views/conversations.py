"""Conversations: POST/GET /api/v1/conversations/ and GET /api/v1/conversations/{id}/."""
from __future__ import annotations

import uuid

from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from agentplatform.api.base import ApiView
from agentplatform.api.pagination import PagePagination
from agentplatform.api.serializers import StrictCharField, StrictInputSerializer
from agentplatform.api.schema import BODY, COMMON, errors
from agentplatform.api.views.card_serializers import DecisionCardSerializer
from agentplatform.runtime.cards import conversation_cards
from agentplatform.runtime.conversation_list import (
    MAX_QUERY_CHARS,
    STATUS_WORDS,
    conversation_status,
    conversations_listed,
)
from agentplatform.runtime.models import Run
from agentplatform.runtime.selectors import (
    conversation_get,
    conversation_latest_run,
    conversation_messages,
)
from agentplatform.runtime.services import conversation_create
from core.errors import InvalidInputError


@extend_schema_serializer(component_name="ConversationSummary")
class ConversationSummarySerializer(serializers.Serializer):
    id = serializers.UUIDField()
    title = serializers.CharField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    last_activity = serializers.DateTimeField(help_text="When its newest run last changed (else updated_at).")
    status = serializers.CharField(help_text=(
        "Where it stands: new, waiting_for_you (a call needs your confirmation), waiting_for_approval, "
        "working, answered, failed, stopped."))
    status_text = serializers.CharField(help_text="The status in words, English / Chinese.")


def conversation_summary(conversation) -> dict:
    """The list shape of a conversation annotated by conversations_listed (or a new one)."""
    status = conversation_status(conversation)
    return {"id": conversation.id, "title": conversation.title, "created_at": conversation.created_at,
            "updated_at": conversation.updated_at, "status": status, "status_text": STATUS_WORDS[status],
            "last_activity": getattr(conversation, "last_activity", None) or conversation.updated_at}


@extend_schema_serializer(component_name="Conversation")
class ConversationDetailSerializer(ConversationSummarySerializer):
    @extend_schema_serializer(component_name="ConversationMessage")
    class MessageSerializer(serializers.Serializer):
        role = serializers.ChoiceField(choices=[("user", "user"), ("assistant", "assistant")])
        content = serializers.CharField()
        run_id = serializers.UUIDField(allow_null=True)
        created_at = serializers.DateTimeField()

    @extend_schema_serializer(component_name="RunReference")
    class RunReferenceSerializer(serializers.Serializer):
        id = serializers.UUIDField()
        status = serializers.ChoiceField(choices=Run.Status.choices)

    messages = MessageSerializer(many=True, help_text="User messages and final answers, oldest first.")
    latest_run = RunReferenceSerializer(allow_null=True, help_text="Follow it with /runs/{id}/events/.")
    cards = DecisionCardSerializer(many=True, help_text=(
        "Every gated call of the conversation, oldest first, rebuilt from stored state: what it asks, what "
        "became of it (codes and words), who decided and why, and the arguments that ran."))


def conversation_detail(conversation, *, new: bool = False) -> dict:
    """The detail shape of a conversation (messages, latest run, decision cards); `new`: just
    created (nothing to read yet)."""
    latest = None if new else conversation_latest_run(conversation=conversation)
    status = conversation_status(conversation) if new else _status_of(conversation, latest)
    return {"id": conversation.id, "title": conversation.title, "created_at": conversation.created_at,
            "updated_at": conversation.updated_at, "status": status, "status_text": STATUS_WORDS[status],
            "last_activity": latest.updated_at if latest is not None else conversation.updated_at,
            "messages": [] if new else list(conversation_messages(conversation=conversation)),
            "latest_run": latest, "cards": [] if new else conversation_cards(conversation=conversation)}


def _status_of(conversation, latest) -> str:
    conversation.latest_status = latest.status if latest is not None else None
    conversation.waits_for_you = False
    status = conversation_status(conversation)
    if status == "waiting_for_approval":
        listed = conversations_listed(user=conversation.user).filter(pk=conversation.pk).first()
        status = conversation_status(listed) if listed is not None else status
    return status


class ConversationListCreateApi(ApiView):
    """My conversations (newest first), and starting a new one."""

    pagination_class = PagePagination

    @extend_schema_serializer(component_name="ConversationCreate")
    class InputSerializer(StrictInputSerializer):
        title = StrictCharField(required=False, allow_blank=True, max_length=200, default="")

    @extend_schema(operation_id="conversations_list", tags=["conversations"], summary="My conversations",
                   parameters=[OpenApiParameter("q", str, description=(
                       "Words to find in the title or in what you wrote (at most 100 characters)."))],
                   responses={200: ConversationSummarySerializer(many=True), **errors(*COMMON, 400, 404)})
    def get(self, request: Request) -> Response:
        query = request.query_params.get("q", "")
        if len(query) > MAX_QUERY_CHARS or "\x00" in query:
            raise InvalidInputError(f"q must be at most {MAX_QUERY_CHARS} characters of text")
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(conversations_listed(user=request.user, query=query), request, view=self)
        return paginator.get_paginated_response(
            ConversationSummarySerializer([conversation_summary(c) for c in page], many=True).data)

    @extend_schema(operation_id="conversations_create", tags=["conversations"], summary="Start a conversation",
                   request=InputSerializer,
                   responses={201: ConversationDetailSerializer, **errors(*BODY, *COMMON)})
    def post(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        conversation = conversation_create(user=request.user, title=serializer.validated_data["title"])
        return Response(ConversationDetailSerializer(conversation_detail(conversation, new=True)).data,
                        status=status.HTTP_201_CREATED)


class ConversationDetailApi(ApiView):
    """One of my conversations with its messages; another user's or tenant's answers 404."""

    @extend_schema(operation_id="conversations_retrieve", tags=["conversations"], summary="A conversation",
                   responses={200: ConversationDetailSerializer, **errors(*COMMON, 404)})
    def get(self, request: Request, conversation_id: uuid.UUID) -> Response:
        conversation = conversation_get(user=request.user, conversation_id=conversation_id)
        return Response(ConversationDetailSerializer(conversation_detail(conversation)).data)
