"""Conversations: POST/GET /api/v1/conversations/ and GET /api/v1/conversations/{id}/."""
from __future__ import annotations

import uuid

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from agentplatform.api.base import ApiView
from agentplatform.api.pagination import PagePagination, paginated_response
from agentplatform.api.serializers import StrictCharField, StrictInputSerializer
from agentplatform.api.schema import BODY, COMMON, errors
from agentplatform.runtime.models import Run
from agentplatform.runtime.selectors import (
    conversation_get,
    conversation_latest_run,
    conversation_messages,
    conversations_for,
)
from agentplatform.runtime.services import conversation_create


@extend_schema_serializer(component_name="ConversationSummary")
class ConversationSummarySerializer(serializers.Serializer):
    id = serializers.UUIDField()
    title = serializers.CharField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


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


def conversation_detail(conversation) -> dict:
    """The detail shape of a conversation (messages and latest run)."""
    return {"id": conversation.id, "title": conversation.title, "created_at": conversation.created_at,
            "updated_at": conversation.updated_at,
            "messages": list(conversation_messages(conversation=conversation)),
            "latest_run": conversation_latest_run(conversation=conversation)}


class ConversationListCreateApi(ApiView):
    """My conversations (newest first), and starting a new one."""

    pagination_class = PagePagination

    @extend_schema_serializer(component_name="ConversationCreate")
    class InputSerializer(StrictInputSerializer):
        title = StrictCharField(required=False, allow_blank=True, max_length=200, default="")

    @extend_schema(operation_id="conversations_list", tags=["conversations"], summary="My conversations",
                   responses={200: ConversationSummarySerializer(many=True), **errors(*COMMON, 404)})
    def get(self, request: Request) -> Response:
        return paginated_response(self, conversations_for(user=request.user), ConversationSummarySerializer)

    @extend_schema(operation_id="conversations_create", tags=["conversations"], summary="Start a conversation",
                   request=InputSerializer,
                   responses={201: ConversationDetailSerializer, **errors(*BODY, *COMMON)})
    def post(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        conversation = conversation_create(user=request.user, title=serializer.validated_data["title"])
        return Response(ConversationDetailSerializer(conversation_detail(conversation)).data,
                        status=status.HTTP_201_CREATED)


class ConversationDetailApi(ApiView):
    """One of my conversations with its messages; another user's or tenant's answers 404."""

    @extend_schema(operation_id="conversations_retrieve", tags=["conversations"], summary="A conversation",
                   responses={200: ConversationDetailSerializer, **errors(*COMMON, 404)})
    def get(self, request: Request, conversation_id: uuid.UUID) -> Response:
        conversation = conversation_get(user=request.user, conversation_id=conversation_id)
        return Response(ConversationDetailSerializer(conversation_detail(conversation)).data)
