"""Forms of the approver dashboard (approve, reject, edit, respond) and of My requests (withdraw)."""
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
    arguments_hash = forms.CharField(required=False, max_length=64)  # the binding the card showed


class RejectForm(forms.Form):
    """A REJECT decision. `reason` is required and must not be blank (the model is told it)."""

    reason = forms.CharField(
        required=True,
        max_length=MAX_COMMENT_CHARS,
        strip=True,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "Reason (required) / 拒绝原因（必填）"}),
        error_messages={"required": "A rejection needs a reason. / 拒绝必须填写原因。"},
    )


class EditForm(forms.Form):
    """An edit of the arguments: the card sends `arg:<name>` fields (read by the view), the hash it
    showed (`base_arguments_hash`, so a concurrent edit is refused) and an optional comment."""

    base_arguments_hash = forms.CharField(max_length=64)
    comment = forms.CharField(required=False, max_length=MAX_COMMENT_CHARS)


class RespondForm(forms.Form):
    """Guidance for the assistant instead of a decision; required, not blank."""

    guidance = forms.CharField(
        required=True, max_length=MAX_COMMENT_CHARS, strip=True,
        error_messages={"required": "A response needs guidance for the assistant. / 回复必须填写指导意见。"})


class WithdrawForm(forms.Form):
    """A requester withdrawing their request, with an optional reason."""

    reason = forms.CharField(required=False, max_length=500, strip=True)
