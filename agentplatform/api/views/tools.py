"""GET /api/v1/tools/: the tools offered to me."""
from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from agentplatform.api.base import ApiView
from agentplatform.api.schema import COMMON, errors
from tools.models import ApprovalPolicy, RiskLevel
from tools.policy import effective_policy
from tools.selectors import offered_tools


class ToolListApi(ApiView):
    """The tools the agent may call for me right now: enabled, allowed for my tenant, `use_tool`
    held, with the risk and approval policy that apply after admin overrides."""

    @extend_schema_serializer(component_name="Tool")
    class OutputSerializer(serializers.Serializer):
        name = serializers.CharField()
        description = serializers.CharField()
        risk = serializers.ChoiceField(choices=RiskLevel.choices)
        approval_policy = serializers.ChoiceField(choices=ApprovalPolicy.choices,
                                                  help_text="NONE, REQUESTER (I confirm), APPROVERS (quorum) or DENY.")
        quorum = serializers.IntegerField(help_text="Approvals needed when approval_policy is APPROVERS.")
        parameters = serializers.JSONField(help_text="JSON Schema of the tool's arguments (what the model sees).")
        owner = serializers.CharField(help_text="The team or person answering for the tool.")
        version = serializers.CharField()
        source = serializers.CharField(help_text='"local" or "mcp:<server>" for a tool of an MCP server.')

    @extend_schema(operation_id="tools_list", tags=["tools"], summary="Tools offered to me",
                   responses={200: OutputSerializer(many=True), **errors(*COMMON)})
    def get(self, request: Request) -> Response:
        rows = []
        for name, (spec, row) in sorted(offered_tools(user=request.user).items()):
            policy = effective_policy(spec, row)
            function = spec.definition()["function"]
            rows.append({"name": name, "description": function["description"], "risk": policy.risk,
                         "approval_policy": policy.policy, "quorum": policy.quorum,
                         "parameters": function["parameters"], "owner": row.owner, "version": row.version,
                         "source": row.source})
        return Response(self.OutputSerializer(rows, many=True).data)
