"""URLs under /api/: the v1 endpoints, the OpenAPI schema, Swagger UI, and a 404 with the error
body for anything else (including ids that are not UUIDs)."""
import uuid

from django.urls import include, path, re_path, register_converter
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from agentplatform.api.base import ApiView, JsonErrors
from agentplatform.api.docs_access import DocsPermission
from agentplatform.api.errors import api_not_found
from agentplatform.api.views.api_keys import ApiKeyListCreateApi, ApiKeyRevokeApi
from agentplatform.api.views.approvals import (ApprovalApproveApi, ApprovalEditApi, ApprovalListApi, ApprovalRejectApi,
                                              ApprovalRespondApi)
from agentplatform.api.views.approval_claims import ApprovalClaimApi, ApprovalReleaseApi
from agentplatform.api.views.audit import AuditEventListApi
from agentplatform.api.views.chat import ChatApi
from agentplatform.api.views.confirmations import ConfirmationCancelApi, ConfirmationConfirmApi, ConfirmationTokenApi
from agentplatform.api.views.kill_switches import (KillSwitchListApi, KillSwitchReleaseApi, ToolReleaseApi,
                                                   ToolStopApi)
from agentplatform.api.views.conversations import ConversationDetailApi, ConversationListCreateApi
from agentplatform.api.views.my_requests import MyRequestListApi, MyRequestWithdrawApi
from agentplatform.api.views.runs import RunCancelApi, RunDetailApi, RunEventsApi
from agentplatform.api.views.tools import ToolListApi

app_name = "api"


class AnyCaseUUIDConverter:
    """A UUID in a path in any letter case (RFC 9562 section 4: input is case-insensitive), where
    Django's `uuid` converter takes lower case only: an upper-case id copied from elsewhere must
    find its object, as it does in a JSON body. Declared `format: uuid` in the schema
    (SPECTACULAR_SETTINGS["PATH_CONVERTER_OVERRIDES"])."""

    regex = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"

    def to_python(self, value: str) -> uuid.UUID:
        return uuid.UUID(value)

    def to_url(self, value) -> str:
        return str(value)


register_converter(AnyCaseUUIDConverter, "anyuuid")

v1 = [
    path("tools/", ToolListApi.as_view(), name="tools"),
    re_path(r"^tools/(?P<name>[A-Za-z0-9_.\-]{1,128})/stop/$", ToolStopApi.as_view(), name="tool-stop"),
    re_path(r"^tools/(?P<name>[A-Za-z0-9_.\-]{1,128})/release/$", ToolReleaseApi.as_view(), name="tool-release"),
    path("kill-switches/", KillSwitchListApi.as_view(), name="kill-switches"),
    path("kill-switches/<anyuuid:stop_id>/release/", KillSwitchReleaseApi.as_view(), name="kill-switch-release"),
    path("conversations/", ConversationListCreateApi.as_view(), name="conversations"),
    path("conversations/<anyuuid:conversation_id>/", ConversationDetailApi.as_view(), name="conversation"),
    path("chat/", ChatApi.as_view(), name="chat"),
    path("runs/<anyuuid:run_id>/", RunDetailApi.as_view(), name="run"),
    path("runs/<anyuuid:run_id>/events/", RunEventsApi.as_view(), name="run-events"),
    path("runs/<anyuuid:run_id>/cancel/", RunCancelApi.as_view(), name="run-cancel"),
    path("confirmations/confirm/", ConfirmationConfirmApi.as_view(), name="confirmation-confirm"),
    path("confirmations/cancel/", ConfirmationCancelApi.as_view(), name="confirmation-cancel"),
    path("confirmations/<anyuuid:confirmation_id>/token/", ConfirmationTokenApi.as_view(), name="confirmation-token"),
    path("approvals/", ApprovalListApi.as_view(), name="approvals"),
    path("approvals/<anyuuid:request_id>/approve/", ApprovalApproveApi.as_view(), name="approval-approve"),
    path("approvals/<anyuuid:request_id>/reject/", ApprovalRejectApi.as_view(), name="approval-reject"),
    path("approvals/<anyuuid:request_id>/edit/", ApprovalEditApi.as_view(), name="approval-edit"),
    path("approvals/<anyuuid:request_id>/respond/", ApprovalRespondApi.as_view(), name="approval-respond"),
    path("approvals/<anyuuid:request_id>/claim/", ApprovalClaimApi.as_view(), name="approval-claim"),
    path("approvals/<anyuuid:request_id>/release/", ApprovalReleaseApi.as_view(), name="approval-release"),
    path("my-requests/", MyRequestListApi.as_view(), name="my-requests"),
    path("my-requests/<anyuuid:request_id>/withdraw/", MyRequestWithdrawApi.as_view(), name="my-request-withdraw"),
    path("audit-events/", AuditEventListApi.as_view(), name="audit-events"),
    path("api-keys/", ApiKeyListCreateApi.as_view(), name="api-keys"),
    path("api-keys/<anyuuid:key_id>/", ApiKeyRevokeApi.as_view(), name="api-key"),
]

# The same authentication as the API (an anonymous client gets 401), and API_DOCS_REQUIRE_LOGIN.
DOCS_ACCESS = {"authentication_classes": ApiView.authentication_classes, "permission_classes": [DocsPermission]}



class SchemaApi(JsonErrors, SpectacularAPIView):
    """The OpenAPI schema (YAML, or JSON with `?format=json`); its errors are the JSON error body."""


class DocsApi(JsonErrors, SpectacularSwaggerSplitView):
    """Swagger UI; its errors (a POST, an unknown `?format=`) are the JSON error body, not HTML."""


urlpatterns = [
    path("v1/", include(v1)),
    path("schema/", SchemaApi.as_view(**DOCS_ACCESS), name="schema"),
    # The split view serves Swagger UI's start-up script as a file: no inline script (CSP script-src 'self').
    path("docs/", DocsApi.as_view(url_name="api:schema", **DOCS_ACCESS), name="docs"),
    re_path(r"^", api_not_found),
]
