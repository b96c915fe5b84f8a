"""The decision card shape (agentplatform.runtime.cards) in the API: what the chat page needs to
draw a gated call after a reload, with codes for programs and words for people."""
from __future__ import annotations

from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from approvals.models import ConfirmationRequest
from tools.models import RiskLevel

OUTCOMES = ("PENDING", "CONFIRMED", "EXECUTED", "FAILED", "REFUSED", "REJECTED", "CANCELLED", "SUPERSEDED",
            "EXPIRED", "RESPONDED", "WITHDRAWN")


@extend_schema_serializer(component_name="DecisionCard")
class DecisionCardSerializer(serializers.Serializer):
    @extend_schema_serializer(component_name="DecisionCardDecider")
    class DeciderSerializer(serializers.Serializer):
        role = serializers.ChoiceField(choices=[(r, r) for r in ("requester", "approver", "administrator")])
        name = serializers.CharField(help_text="The person's display name (full name, else username).")

    @extend_schema_serializer(component_name="DecisionCardDecision")
    class DecisionSerializer(serializers.Serializer):
        name = serializers.CharField(help_text="The reviewer's display name.")
        decision = serializers.CharField(help_text="APPROVE, REJECT, EDIT or RESPOND.")
        decision_text = serializers.CharField(help_text="The decision in words, English / Chinese.")
        comment = serializers.CharField(allow_blank=True, help_text="Their comment or reason (masked).")
        at = serializers.DateTimeField()

    @extend_schema_serializer(component_name="DecisionCardEdit")
    class EditSerializer(serializers.Serializer):
        @extend_schema_serializer(component_name="DecisionCardChange")
        class ChangeSerializer(serializers.Serializer):
            field = serializers.CharField()
            # "from" is a Python keyword: declared below
            to = serializers.JSONField(allow_null=True)
            text = serializers.CharField(help_text='e.g. "Amount / 金额: CNY 30.00 → CNY 20.00".')

            def get_fields(self):
                fields = super().get_fields()
                fields["from"] = serializers.JSONField(allow_null=True)
                return fields

        by = serializers.CharField(help_text="Who changed the arguments (display name).")
        comment = serializers.CharField(allow_blank=True)
        changes = ChangeSerializer(many=True)

    confirmation_id = serializers.UUIDField()
    run_id = serializers.UUIDField(allow_null=True)
    tool_call_id = serializers.CharField(allow_blank=True)
    tool = serializers.CharField(help_text="The tool's wire name (for programs).")
    tool_label = serializers.CharField(help_text="The tool's title for people, e.g. \"Refund an order / 订单退款\".")
    risk = serializers.ChoiceField(choices=RiskLevel.choices)
    needs = serializers.ChoiceField(choices=[("requester", "requester"), ("approvers", "approvers")])
    quorum = serializers.IntegerField()
    approvals = serializers.IntegerField(help_text="Approvals that count now.")
    status = serializers.ChoiceField(choices=ConfirmationRequest.Status.choices)
    outcome = serializers.ChoiceField(choices=[(o, o) for o in OUTCOMES], help_text="The real ending (code).")
    outcome_code = serializers.CharField(allow_blank=True)
    state = serializers.ChoiceField(choices=[("pending", "pending"), ("ok", "ok"), ("failed", "failed")])
    status_text = serializers.CharField(help_text="What became of the call, in words, English / Chinese.")
    summary = serializers.CharField(help_text="The call as it runs or ran (after an edit: the edited call).")
    arguments = serializers.JSONField(help_text="The arguments as they run or ran, masked.")
    facts = serializers.JSONField()
    written_by_assistant = serializers.DictField(child=serializers.CharField())
    decided_by = DeciderSerializer(allow_null=True, help_text="Who ended it; null: the platform or nobody yet.")
    reason = serializers.CharField(allow_blank=True, help_text="A rejection's reason, guidance, ... (masked).")
    decisions = DecisionSerializer(many=True, help_text="Each reviewer's decision with their comment.")
    edits = EditSerializer(many=True, help_text="Changes reviewers made to the arguments, old → new.")
    edit_text = serializers.CharField(allow_blank=True, help_text="The edits in one line of words.")
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    decided_at = serializers.DateTimeField(allow_null=True)
