"""URLs under /api/: the v1 endpoints, the OpenAPI schema, Swagger UI, and a 404 with the error
body for anything else (including ids that are not UUIDs)."""
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from agentplatform.api.base import ApiView
from agentplatform.api.docs_access import DocsPermission
from agentplatform.api.errors import api_not_found
from agentplatform.api.views.api_keys import ApiKeyListCreateApi, ApiKeyRevokeApi
from agentplatform.api.views.approvals import (ApprovalApproveApi, ApprovalEditApi, ApprovalListApi, ApprovalRejectApi,
                                              ApprovalRespondApi)
from agentplatform.api.views.audit import AuditEventListApi
from agentplatform.api.views.chat import ChatApi
from agentplatform.api.views.confirmations import ConfirmationCancelApi, ConfirmationConfirmApi, ConfirmationTokenApi
from agentplatform.api.views.conversations import ConversationDetailApi, ConversationListCreateApi
from agentplatform.api.views.my_requests import MyRequestListApi, MyRequestWithdrawApi
from agentplatform.api.views.runs import RunCancelApi, RunDetailApi, RunEventsApi
from agentplatform.api.views.tools import ToolListApi

app_name = "api"

v1 = [
    path("tools/", ToolListApi.as_view(), name="tools"),
    path("conversations/", ConversationListCreateApi.as_view(), name="conversations"),
    path("conversations/<uuid:conversation_id>/", ConversationDetailApi.as_view(), name="conversation"),
    path("chat/", ChatApi.as_view(), name="chat"),
    path("runs/<uuid:run_id>/", RunDetailApi.as_view(), name="run"),
    path("runs/<uuid:run_id>/events/", RunEventsApi.as_view(), name="run-events"),
    path("runs/<uuid:run_id>/cancel/", RunCancelApi.as_view(), name="run-cancel"),
    path("confirmations/confirm/", ConfirmationConfirmApi.as_view(), name="confirmation-confirm"),
    path("confirmations/cancel/", ConfirmationCancelApi.as_view(), name="confirmation-cancel"),
    path("confirmations/<uuid:confirmation_id>/token/", ConfirmationTokenApi.as_view(), name="confirmation-token"),
    path("approvals/", ApprovalListApi.as_view(), name="approvals"),
    path("approvals/<uuid:request_id>/approve/", ApprovalApproveApi.as_view(), name="approval-approve"),
    path("approvals/<uuid:request_id>/reject/", ApprovalRejectApi.as_view(), name="approval-reject"),
    path("approvals/<uuid:request_id>/edit/", ApprovalEditApi.as_view(), name="approval-edit"),
    path("approvals/<uuid:request_id>/respond/", ApprovalRespondApi.as_view(), name="approval-respond"),
    path("my-requests/", MyRequestListApi.as_view(), name="my-requests"),
    path("my-requests/<uuid:request_id>/withdraw/", MyRequestWithdrawApi.as_view(), name="my-request-withdraw"),
    path("audit-events/", AuditEventListApi.as_view(), name="audit-events"),
    path("api-keys/", ApiKeyListCreateApi.as_view(), name="api-keys"),
    path("api-keys/<uuid:key_id>/", ApiKeyRevokeApi.as_view(), name="api-key"),
]

# The same authentication as the API (an anonymous client gets 401), and API_DOCS_REQUIRE_LOGIN.
DOCS_ACCESS = {"authentication_classes": ApiView.authentication_classes, "permission_classes": [DocsPermission]}

urlpatterns = [
    path("v1/", include(v1)),
    path("schema/", SpectacularAPIView.as_view(**DOCS_ACCESS), name="schema"),
    # The split view serves Swagger UI's start-up script as a file: no inline script (CSP script-src 'self').
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="api:schema", **DOCS_ACCESS), name="docs"),
    re_path(r"^", api_not_found),
]
