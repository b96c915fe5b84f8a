"""Webhook notifications: one signed JSON POST per event and endpoint of the request's
tenant, retried with backoff through Celery on 5xx/timeouts, one delivery row per attempt, the
URL checked, the secret never sent, the requester's decision reported too."""
from __future__ import annotations

import hashlib
import hmac
import json
import logging
import uuid

import pytest
from django.core.exceptions import ValidationError

from approvals import approver_actions
from notifications import signing
from notifications.models import WebhookDelivery, WebhookEndpoint
from notifications.delivery import deliver_webhook
from notifications.urlcheck import validate_webhook_url

pytestmark = pytest.mark.django_db

Outcome = WebhookDelivery.Outcome


def _json(received) -> dict:
    return json.loads(received.body)


def test_a_new_request_is_posted_signed_with_the_tenant_secret(endpoint, receiver, make_refund, people):
    globex_hook = WebhookEndpoint.objects.create(tenant=people["globex"]["admin"].tenant, url=receiver.url + "/globex")

    request = make_refund()

    # then one POST, to acme's endpoint only (globex's endpoint hears nothing of acme)
    assert [r.path for r in receiver.received] == ["/hooks/approvals"]
    got = receiver.received[0]
    body = _json(got)
    assert got.headers["content-type"] == "application/json; charset=utf-8"
    assert got.headers["x-agentplatform-event"] == "approval.requested"
    assert got.headers["x-agentplatform-delivery"] == body["id"]
    # the signature: HMAC-SHA256 of "<timestamp>.<raw body>" keyed with the endpoint's secret
    timestamp = got.headers["x-agentplatform-timestamp"]
    expected = hmac.new(endpoint.secret.encode(), timestamp.encode() + b"." + got.body, hashlib.sha256).hexdigest()
    assert got.headers["x-agentplatform-signature"] == f"sha256={expected}"
    assert signing.verify(secret=endpoint.secret, timestamp=timestamp, body=got.body,
                          signature=got.headers["x-agentplatform-signature"])
    assert not signing.verify(secret=globex_hook.secret, timestamp=timestamp, body=got.body,
                              signature=got.headers["x-agentplatform-signature"])
    assert not signing.verify(secret=endpoint.secret, timestamp=timestamp, body=got.body.replace(b"50", b"99"),
                              signature=got.headers["x-agentplatform-signature"])
    # the body: what an approver needs, and the link to the request
    assert body["event"] == "approval.requested" and body["tenant"] == "acme"
    r = body["request"]
    assert r["id"] == str(request.pk) and r["summary"] == request.summary
    assert r["url"] == f"https://approvals.example.com/approvals/{request.pk}/"
    assert (r["risk"], r["quorum"], r["approvals"], r["requester"]) == ("CRITICAL", 2, 0, "acme-requester")
    facts = {f["name"]: f["value"] for f in r["facts"]}
    assert facts["refundable_remainder"] == request.approval_context["facts"]["refundable_remainder"]["display"]
    assert r["written_by_assistant"][0]["text"] == "it arrived broken"
    assert r["url"] in body["text"] and "Approval needed" in body["text"]
    # the secret never travels in the body
    assert endpoint.secret not in got.body.decode()
    row = WebhookDelivery.objects.get()
    assert (row.endpoint_id, row.attempt, row.outcome, row.response_status) == (endpoint.pk, 1, Outcome.SUCCEEDED, 200)
    assert str(row.message_id) == body["id"] and row.confirmation_id == request.pk


def test_5xx_is_retried_with_backoff_and_every_attempt_is_logged(settings, endpoint, receiver, make_refund, waits):
    settings.WEBHOOK_RETRY_BACKOFF = 5
    receiver.script([500, 503, 200])

    make_refund()

    rows = list(WebhookDelivery.objects.order_by("attempt"))
    assert [(r.attempt, r.outcome, r.response_status) for r in rows] == [
        (1, Outcome.RETRYING, 500), (2, Outcome.RETRYING, 503), (3, Outcome.SUCCEEDED, 200)]
    assert [r.retry_in_seconds for r in rows] == [5, 10, None]  # exponential: 5 x 2**n
    assert waits == [5, 10]
    assert len({r.message_id for r in rows}) == 1  # one message, three attempts
    deliveries = {r.headers["x-agentplatform-delivery"] for r in receiver.received}
    assert deliveries == {str(rows[0].message_id)}  # a receiver can drop duplicates by it
    for got in receiver.received:  # each attempt signed afresh
        assert signing.verify(secret=endpoint.secret, timestamp=got.headers["x-agentplatform-timestamp"],
                              body=got.body, signature=got.headers["x-agentplatform-signature"])


def test_a_timeout_is_retried(settings, endpoint, receiver, make_refund, waits):
    settings.WEBHOOK_TIMEOUT_SECONDS = 0.3
    receiver.delays([1.0])

    make_refund()

    rows = list(WebhookDelivery.objects.order_by("attempt"))
    assert [(r.attempt, r.outcome) for r in rows] == [(1, Outcome.RETRYING), (2, Outcome.SUCCEEDED)]
    assert rows[0].error.startswith("timed out") and rows[0].response_status is None


def test_retries_stop_at_the_limit_and_a_4xx_is_not_retried(monkeypatch, endpoint, receiver, make_refund, waits):
    monkeypatch.setattr(deliver_webhook, "max_retries", 2)
    receiver.script([500, 500, 500, 500])
    make_refund()
    rows = list(WebhookDelivery.objects.order_by("attempt"))
    assert [(r.attempt, r.outcome) for r in rows] == [(1, Outcome.RETRYING), (2, Outcome.RETRYING),
                                                      (3, Outcome.FAILED)]
    assert len(receiver.received) == 3

    WebhookDelivery.objects.all().delete()
    receiver.script([410, 410])  # the first request's retraction (it was replaced), the new request
    make_refund(text="Refund A202607290003 amount 20 because a part is missing")
    assert sorted((r.event, r.attempt, r.outcome, r.response_status) for r in WebhookDelivery.objects.all()) == [
        ("approval.requested", 1, Outcome.FAILED, 410), ("approval.retracted", 1, Outcome.FAILED, 410)]


def test_an_unreachable_receiver_is_retried(local_hooks, requester, make_refund, waits, monkeypatch):
    monkeypatch.setattr(deliver_webhook, "max_retries", 1)
    WebhookEndpoint.objects.create(tenant=requester.tenant, url="http://127.0.0.1:9/closed")  # discard port
    make_refund()
    rows = list(WebhookDelivery.objects.order_by("attempt"))
    assert [(r.attempt, r.outcome) for r in rows] == [(1, Outcome.RETRYING), (2, Outcome.FAILED)]
    assert "connection failed" in rows[0].error


def test_the_decision_is_posted_too(endpoint, receiver, make_refund, approver1, django_capture_on_commit_callbacks):
    request = make_refund()
    with django_capture_on_commit_callbacks(execute=True):
        approver_actions.confirmation_reject(request_id=request.pk, approver=approver1, reason="not covered")
    body = _json(receiver.received[-1])
    assert body["event"] == "approval.decided"
    r = body["request"]
    assert (r["outcome"], r["decided_by"], r["reason"]) == ("REJECTED", "acme-approver1", "not covered")
    assert "Request rejected / 已拒绝 by acme-approver1" in body["text"]


def test_inactive_endpoints_hear_nothing(endpoint, receiver, make_refund):
    endpoint.is_active = False
    endpoint.save()
    make_refund()
    assert receiver.received == [] and not WebhookDelivery.objects.exists()


@pytest.mark.parametrize("url", [
    "ftp://hooks.example.com/x", "file:///etc/passwd", "javascript:alert(1)", "hooks.example.com/x",
    "http://user:pw@hooks.example.com/x",
])
def test_a_webhook_url_must_be_http_or_https(settings, url):
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = True
    with pytest.raises(ValidationError) as refused:
        validate_webhook_url(url)
    assert refused.value.code == "WEBHOOK_URL_INVALID"


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:8000/hook", "http://localhost/hook", "http://10.1.2.3/hook", "http://192.168.0.10/hook",
    "http://172.16.5.4/hook", "http://169.254.169.254/latest/meta-data", "http://[::1]/hook", "http://0.0.0.0/",
    "http://[::ffff:127.0.0.1]/hook", "http://100.64.0.1/hook",
])
def test_private_and_loopback_addresses_are_refused_unless_allowed(settings, url):
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = False
    with pytest.raises(ValidationError) as refused:
        validate_webhook_url(url)
    assert refused.value.code == "WEBHOOK_URL_PRIVATE"

    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = True
    validate_webhook_url(url)  # allowed now


def test_a_public_address_is_accepted(settings):
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = False
    # a public address passes (no ValidationError), where the same path on a private one is refused
    assert validate_webhook_url("https://93.184.215.14/hooks/approvals") is None
    with pytest.raises(ValidationError):
        validate_webhook_url("https://10.0.0.14/hooks/approvals")


def test_the_endpoint_form_refuses_a_private_url(settings, requester):
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = False
    endpoint = WebhookEndpoint(tenant=requester.tenant, url="http://127.0.0.1/hook")
    with pytest.raises(ValidationError) as refused:
        endpoint.full_clean()
    assert "url" in refused.value.message_dict


def test_an_address_that_became_private_is_not_called(settings, endpoint, receiver, make_refund):
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = False  # the endpoint was saved while it was allowed

    make_refund()

    assert receiver.received == []
    row = WebhookDelivery.objects.get()
    assert row.outcome == Outcome.FAILED and "private, loopback or reserved" in row.error


def test_logs_name_the_host_only_and_never_a_secret_or_token(caplog, endpoint, receiver, make_refund, waits):
    receiver.script([500, 200])
    with caplog.at_level(logging.DEBUG):
        make_refund()
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "webhook approval.requested" in text and "to 127.0.0.1" in text
    assert "/hooks/approvals" not in text  # a relay's URL path may itself be a secret
    assert endpoint.secret not in text
    assert "ct_" not in text


def test_the_signature_check_refuses_an_old_timestamp():
    body = b'{"a":1}'
    signature = signing.sign(secret="whsec_x", timestamp=1_000_000, body=body)
    assert signing.verify(secret="whsec_x", timestamp=1_000_000, body=body, signature=signature, now=1_000_100)
    assert not signing.verify(secret="whsec_x", timestamp=1_000_000, body=body, signature=signature, now=1_000_400)


def test_a_deleted_endpoint_is_skipped(endpoint):
    endpoint_id = endpoint.pk
    endpoint.delete()
    result = deliver_webhook.apply(args=[endpoint_id, str(uuid.uuid4()), "approval.requested", None, {}]).get()
    assert result == "SKIPPED"


def test_an_edit_and_a_withdrawal_are_posted_once_each(endpoint, receiver, make_refund, approver2, requester,
                                                       django_capture_on_commit_callbacks):
    from approvals import requester_actions
    from approvals.amendments import confirmation_edit
    from notifications import services

    request = make_refund()
    with django_capture_on_commit_callbacks(execute=True):
        confirmation_edit(request_id=request.pk, editor=approver2, arguments={**request.arguments, "amount": "20.00"},
                          base_arguments_hash=request.arguments_hash)
    revised = _json(receiver.received[-1])
    assert revised["event"] == "approval.revised"
    assert revised["changes"] == [{"field": "amount", "from": "50.00", "to": "20.00"}]
    assert (revised["editor_name"], revised["request"]["revision"]) == ("acme-approver2", 1)
    assert revised["text"].startswith("Edited, approval needed again / 已修改，需重新审批: Refund CNY 20.00")

    with django_capture_on_commit_callbacks(execute=True):
        requester_actions.confirmation_withdraw(request_id=request.pk, requester=requester)
    retracted = _json(receiver.received[-1])
    assert (retracted["event"], retracted["ending"]) == ("approval.retracted", "WITHDRAWN")
    assert "withdrawn by the requester" in retracted["text"]

    # the same signals again (a retried task) post nothing more
    posted = len(receiver.received)
    services.notify_revised(request_id=request.pk, revision=1)
    services.notify_retraction(request_id=request.pk, ending="WITHDRAWN")
    assert len(receiver.received) == posted == 3
