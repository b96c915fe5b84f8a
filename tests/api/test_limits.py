"""Limits: per-user rates on chat, confirm, approve and API-key endpoints (429
THROTTLED + Retry-After), failed sign-ins locked out per username and per IP (django-axes), and
random confirmation tokens leave a sample of audit rows, not one each."""
from __future__ import annotations

import secrets

import pytest
from axes.models import AccessAttempt
from rest_framework.test import APIClient

from agentplatform.runtime.demo.seed import DEMO_PASSWORD
from approvals import requester_actions
from approvals.errors import ConfirmationNotFound
from audit.models import AuditEvent
from tests.api.conftest import assert_error


def _as(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def _tight(settings, scope: str) -> None:
    settings.API_THROTTLE_RATES = {**settings.API_THROTTLE_RATES, scope: "2/minute"}


@pytest.mark.parametrize("scope,method,url,body", [
    ("chat", "post", "/api/v1/chat/", {"message": "How many SKU-10001 in WH-HZ-01?"}),
    ("confirm", "post", "/api/v1/confirmations/confirm/", {"token": "ct_" + "x" * 40}),
    ("confirm", "post", "/api/v1/confirmations/cancel/", {"token": "ct_" + "x" * 40}),
    ("approve", "post", "/api/v1/approvals/00000000-0000-4000-8000-000000000000/approve/", {}),
    ("approve", "post", "/api/v1/approvals/00000000-0000-4000-8000-000000000000/reject/", {"reason": "no"}),
    ("api_keys", "post", "/api/v1/api-keys/", {"name": "k"}),
])
def test_each_limited_endpoint_answers_429_with_retry_after_per_user(settings, requester, approver1, scope, method,
                                                                     url, body):
    _tight(settings, scope)
    client = _as(requester)
    for _ in range(2):
        assert getattr(client, method)(url, body, format="json").status_code != 429

    refused = getattr(client, method)(url, body, format="json")

    assert_error(refused, 429, "THROTTLED", retryable=True)
    assert 0 < int(refused["Retry-After"]) <= 60
    assert getattr(_as(approver1), method)(url, body, format="json").status_code != 429  # per user


def test_an_empty_rate_means_no_limit(settings, requester):
    settings.API_THROTTLE_RATES = {**settings.API_THROTTLE_RATES, "api_keys": None}
    client = _as(requester)
    assert all(client.get("/api/v1/api-keys/").status_code == 200 for _ in range(30))


def test_300_random_tokens_leave_a_sample_of_audit_rows_not_300(requester):
    before = AuditEvent.objects.filter(decision="REFUSED").count()

    for _ in range(300):
        with pytest.raises(ConfirmationNotFound):
            requester_actions.confirmation_confirm(token="ct_" + secrets.token_urlsafe(32), user=requester)

    rows = list(AuditEvent.objects.filter(decision="REFUSED").order_by("chain_seq")[before:])
    assert len(rows) == 3  # the 1st, 10th and 100th of this window
    assert {(r.status, r.actor_id) for r in rows} == {("CONFIRMATION_INVALID", requester.pk)}, [(r.status, r.message) for r in rows]
    assert "100 such refusals" in rows[-1].message


def _sign_in(client, username: str, password: str, ip: str = "10.0.0.1"):
    return client.post("/accounts/login/", {"username": username, "password": password}, REMOTE_ADDR=ip)


def test_failed_sign_ins_lock_the_account_then_answer_429(client, settings, requester):
    settings.AXES_FAILURE_LIMIT = 3
    for _ in range(2):
        assert _sign_in(client, requester.username, "wrong").status_code == 200  # the form again

    locked = _sign_in(client, requester.username, "wrong")
    after = _sign_in(client, requester.username, DEMO_PASSWORD, ip="10.9.9.9")  # right password, other address

    for response in (locked, after):
        assert response.status_code == 429
        assert response.json()["code"] == "LOGIN_LOCKED_OUT" and response.json()["retryable"] is True
        assert int(response["Retry-After"]) == int(settings.AXES_COOLOFF_TIME.total_seconds())
    assert AccessAttempt.objects.filter(username=requester.username).exists()


def test_failed_sign_ins_from_one_address_lock_that_address(client, settings, requester, approver1):
    settings.AXES_FAILURE_LIMIT = 3
    for name in ("ghost-1", "ghost-2", "ghost-3"):
        _sign_in(client, name, "wrong", ip="10.6.6.6")

    assert _sign_in(client, approver1.username, DEMO_PASSWORD, ip="10.6.6.6").status_code == 429
    assert _sign_in(client, approver1.username, DEMO_PASSWORD, ip="10.7.7.7").status_code == 302


def test_a_tenant_past_its_daily_model_calls_gets_429_until_midnight(settings, requester, outsider):
    from agentplatform.runtime.models import Run, TenantModelQuota

    settings.TENANT_MODEL_CALLS_PER_DAY = 3  # an inventory question costs two model calls
    question = {"message": "How many SKU-10001 in WH-HZ-01?"}
    assert _as(requester).post("/api/v1/chat/", question, format="json").status_code == 200

    refused = _as(requester).post("/api/v1/chat/", question, format="json")

    assert_error(refused, 429, "MODEL_QUOTA_EXCEEDED", retryable=True)
    assert 0 < int(refused["Retry-After"]) <= 86400
    assert Run.objects.filter(user=requester, status=Run.Status.FAILED, error_code="MODEL_QUOTA_EXCEEDED").exists()
    assert _as(outsider).post("/api/v1/chat/", question, format="json").status_code == 200  # per tenant
    TenantModelQuota.objects.create(tenant=requester.tenant, calls_per_day=100)  # the admin's override
    assert _as(requester).post("/api/v1/chat/", question, format="json").status_code == 200


def test_preflights_do_not_use_up_the_allowance(settings, requester):
    _tight(settings, "chat")
    client = _as(requester)
    for _ in range(5):
        assert client.options("/api/v1/chat/").status_code == 200

    assert client.post("/api/v1/chat/", {"message": "How many SKU-10001 in WH-HZ-01?"}, format="json").status_code == 200
