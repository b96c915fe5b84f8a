"""The dashboard's edit form offers only what the tool lets an approver change (refund_order: the
amount, at most the requester's, and the reason; never the order), and a crafted POST that
changes anything else is refused with EDIT_NOT_ALLOWED and changes nothing."""
from __future__ import annotations

from django.contrib.messages import get_messages
from django.urls import reverse

from approvals.models import Approval, ConfirmationRequest


def _messages(response) -> list[tuple[str, str, str]]:
    return [(m.level_tag, m.extra_tags, str(m)) for m in get_messages(response.wsgi_request)]


def test_the_edit_form_offers_only_the_editable_arguments(client, approver1, refund_request):
    client.force_login(approver1)
    html = client.get(reverse("approvals:pending")).content.decode()
    assert 'name="arg:amount"' in html and 'name="arg:reason"' in html
    assert 'name="arg:order_id"' not in html  # shown with the arguments, never offered for editing
    assert "at most 50.00, what the requester asked for" in html  # the requester's amount is the limit


def test_a_crafted_post_beyond_the_request_is_refused(client, approver1, refund_request):
    client.force_login(approver1)
    response = client.post(reverse("approvals:edit", args=[refund_request.pk]), {
        "base_arguments_hash": refund_request.arguments_hash, "arg:order_id": "A202607290006",
        "arg:amount": "500", "comment": ""})
    assert response.status_code == 302
    [(level, code, text)] = _messages(response)
    assert (level, code) == ("error", "EDIT_NOT_ALLOWED")
    assert "order_id cannot be edited" in text and "amount may only go down from 50.00" in text
    after = ConfirmationRequest.objects.get(pk=refund_request.pk)
    assert (after.arguments, after.revision) == (refund_request.arguments, 0)
    assert not Approval.objects.filter(request=refund_request).exists()


def test_an_edit_within_the_request_is_taken(client, approver1, refund_request):
    client.force_login(approver1)
    response = client.post(reverse("approvals:edit", args=[refund_request.pk]), {
        "base_arguments_hash": refund_request.arguments_hash, "arg:amount": "20", "comment": "only one chair"})
    assert [level for level, _, _ in _messages(response)] == ["success"]
    assert ConfirmationRequest.objects.get(pk=refund_request.pk).arguments["amount"] == "20.00"
