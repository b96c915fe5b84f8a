"""Forms of the approver dashboard: approve with an optional comment, reject with a required reason."""
from __future__ import annotations

from django import forms

MAX_COMMENT_CHARS = 2000  # the service keeps at most this many characters (Approval.comment)


class ApproveForm(forms.Form):
    """An APPROVE decision. `comment` is optional and stored on the Approval row."""

    comment = forms.CharField(
        required=False,
        max_length=MAX_COMMENT_CHARS,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "Optional comment / 备注（可选）"}),
    )


class RejectForm(forms.Form):
    """A REJECT decision. `reason` is required and must not be blank (the model is told it)."""

    reason = forms.CharField(
        required=True,
        max_length=MAX_COMMENT_CHARS,
        strip=True,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "Reason (required) / 拒绝原因（必填）"}),
        error_messages={"required": "A rejection needs a reason. / 拒绝必须填写原因。"},
    )
