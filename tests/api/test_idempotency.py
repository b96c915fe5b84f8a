"""The Idempotency-Key header of POST /api/v1/chat/ (IETF httpapi draft): replay, 422, 409, scope,
expiry; the 409 proven with a real concurrent request on PostgreSQL."""
from __future__ import annotations

import datetime
import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from core import clock
from agentplatform.api.idempotency import http_idempotency_prune, request_fingerprint
from agentplatform.api.models import HttpIdempotencyKey
from agentplatform.runtime.models import Run
from tools.catalog.models import Cancellation
from tests.api.conftest import CANCEL_ORDER, assert_error

ASK = {"message": "How many SKU-10001 in WH-HZ-01?"}


def post(client, body, key, **extra):
    return client.post("/api/v1/chat/", data=json.dumps(body), content_type="application/json",
                       HTTP_IDEMPOTENCY_KEY=key, **extra)


def test_same_key_and_body_replays_the_stored_response_without_running_again(api, requester):
    client = api(requester)
    first = post(client, ASK, "key-1")
    assert first.status_code == 200 and "Idempotent-Replayed" not in first
    # the same JSON with other key order and spacing is the same body
    again = client.post("/api/v1/chat/", data=' { "message" :  "How many SKU-10001 in WH-HZ-01?" } ',
                        content_type="application/json", HTTP_IDEMPOTENCY_KEY="key-1")
    assert again.status_code == 200 and again["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert Run.objects.filter(user=requester).count() == 1


def test_a_quoted_structured_field_key_is_the_same_key(api, requester):
    client = api(requester)
    first = post(client, ASK, '"abc-123"')
    again = post(client, ASK, "abc-123")
    assert again["Idempotent-Replayed"] == "true" and again.json()["run_id"] == first.json()["run_id"]


def test_replay_never_contains_the_confirmation_token(api, requester):
    client = api(requester)
    body = {"message": f"Please cancel order {CANCEL_ORDER} because it is late"}
    first = post(client, body, "cancel-1").json()
    token = first["pending"][0]["token"]
    assert token.startswith("ct_")
    stored = HttpIdempotencyKey.objects.get(key="cancel-1")
    assert token not in json.dumps(stored.response_body)  # only digests of tokens are ever stored

    replay = post(client, body, "cancel-1").json()
    assert replay["pending"][0]["token"] is None
    assert {k: v for k, v in replay["pending"][0].items() if k != "token"} == \
        {k: v for k, v in first["pending"][0].items() if k != "token"}
    # the first token still works: a replay changes nothing
    confirmed = client.post("/api/v1/confirmations/confirm/", {"token": token}, format="json")
    assert confirmed.status_code == 200


def test_final_errors_are_replayed_too(api, nobody):
    client = api(nobody)
    body = {"message": f"cancel {CANCEL_ORDER} because I can"}
    assert_error(post(client, body, "deny-1"), 403, "PERMISSION_DENIED")
    replay = post(client, body, "deny-1")
    assert_error(replay, 403, "PERMISSION_DENIED")
    assert replay["Idempotent-Replayed"] == "true"
    assert Run.objects.filter(user=nobody).count() == 1


def test_same_key_with_another_body_is_422(api, requester):
    client = api(requester)
    post(client, ASK, "key-2")
    response = post(client, {"message": "How many SKU-20001?"}, "key-2")
    assert_error(response, 422, "IDEMPOTENCY_KEY_REUSED")
    assert Run.objects.filter(user=requester).count() == 1


def test_a_key_still_processing_is_409_in_progress_retryable(api, requester):
    # given: another request holds the claim right now
    now = clock.now()
    HttpIdempotencyKey.objects.create(
        tenant=requester.tenant, user=requester, key="busy",
        fingerprint=request_fingerprint(method="POST", path="/api/v1/chat/", body=ASK),
        locked_until=now + datetime.timedelta(minutes=5), created_at=now, expires_at=now + datetime.timedelta(hours=24))
    # when / then
    assert_error(post(api(requester), ASK, "busy"), 409, "IN_PROGRESS", retryable=True)
    assert not Run.objects.filter(user=requester).exists()


def test_a_claim_abandoned_past_its_lease_is_taken_over(api, requester):
    now = clock.now()
    HttpIdempotencyKey.objects.create(
        tenant=requester.tenant, user=requester, key="crashed",
        fingerprint=request_fingerprint(method="POST", path="/api/v1/chat/", body=ASK),
        locked_until=now - datetime.timedelta(seconds=1), created_at=now - datetime.timedelta(minutes=6),
        expires_at=now + datetime.timedelta(hours=23))
    response = post(api(requester), ASK, "crashed")
    assert response.status_code == 200 and "Idempotent-Replayed" not in response
    assert HttpIdempotencyKey.objects.get(key="crashed").status == HttpIdempotencyKey.Status.COMPLETED


def test_keys_are_scoped_by_user_and_tenant(api, requester, approver1, outsider):
    first = post(api(requester), ASK, "shared-key").json()
    # another tenant's user with the same key and body: their own request runs
    theirs = post(api(outsider), ASK, "shared-key")
    assert theirs.status_code == 200 and "Idempotent-Replayed" not in theirs
    assert theirs.json()["run_id"] != first["run_id"]
    # a colleague in the same tenant: their own request runs too (and is refused on its own merits)
    colleague = post(api(approver1), ASK, "shared-key")
    assert_error(colleague, 403, "PERMISSION_DENIED")
    assert "Idempotent-Replayed" not in colleague
    # the requester's own replay is still theirs
    assert post(api(requester), ASK, "shared-key").json()["run_id"] == first["run_id"]
    assert HttpIdempotencyKey.objects.filter(key="shared-key").count() == 3


def test_a_key_expires_after_24_hours(api, requester, monkeypatch):
    client = api(requester)
    first = post(client, ASK, "old-key").json()
    later = clock.now() + datetime.timedelta(hours=24, seconds=1)
    monkeypatch.setattr(clock, "now", lambda: later)
    second = post(client, {"message": "How many SKU-20001?"}, "old-key")
    assert second.status_code == 200 and second.json()["run_id"] != first["run_id"]


def test_prune_deletes_only_expired_keys(api, requester, monkeypatch):
    client = api(requester)
    post(client, ASK, "k-old")
    later = clock.now() + datetime.timedelta(hours=25)
    monkeypatch.setattr(clock, "now", lambda: later)
    post(client, ASK, "k-new")
    assert http_idempotency_prune() == 1
    assert list(HttpIdempotencyKey.objects.values_list("key", flat=True)) == ["k-new"]


@pytest.mark.parametrize("key", ["", "   ", "x" * 256, "caf\u00e9"])
def test_an_invalid_key_is_400(api, requester, key):
    response = api(requester).post("/api/v1/chat/", data=json.dumps(ASK), content_type="application/json",
                                   HTTP_IDEMPOTENCY_KEY=key.encode("utf-8").decode("latin-1"))
    assert_error(response, 400, "INVALID_ARGUMENTS")
    assert not HttpIdempotencyKey.objects.exists()


def test_an_invalid_body_claims_no_key(api, requester):
    client = api(requester)
    assert_error(post(client, {"message": 1}, "k"), 400, "INVALID_ARGUMENTS")
    assert post(client, ASK, "k").status_code == 200  # the key was free: no 422


@pytest.mark.postgres
def test_concurrent_requests_with_one_key_run_once_and_the_other_gets_409(api, people, transactional_db,
                                                                           monkeypatch):
    """A real second request arrives while the first is inside the model call: 409, one run."""
    from agentplatform.llm import client as llm

    requester = people["acme"]["requester"]
    entered, release = threading.Event(), threading.Event()
    real_complete = llm.complete

    def slow_model(**kwargs):  # the outer edge: the model endpoint takes its time
        entered.set()
        assert release.wait(30)
        return real_complete(**kwargs)

    monkeypatch.setattr(llm, "complete", slow_model)
    body = {"message": f"Please cancel order {CANCEL_ORDER} because it is late"}

    def first():
        try:
            return post(api(requester), body, "race")
        finally:
            connection.close()

    def second():
        try:
            assert entered.wait(30)
            return post(api(requester), body, "race")
        finally:
            release.set()
            connection.close()

    with ThreadPoolExecutor(2) as pool:
        a, b = pool.submit(first), pool.submit(second)
        first_response, second_response = a.result(60), b.result(60)

    assert first_response.status_code == 200
    assert first_response.json()["status"] == "AWAITING_CONFIRMATION"
    assert_error(second_response, 409, "IN_PROGRESS", retryable=True)
    assert Run.objects.filter(user=requester).count() == 1
    # once finished, the same key replays the first answer
    replay = post(api(requester), body, "race")
    assert replay["Idempotent-Replayed"] == "true" and replay.json()["run_id"] == first_response.json()["run_id"]
    assert Cancellation.objects.count() == 0


@pytest.mark.postgres
def test_many_concurrent_claims_of_one_key_let_exactly_one_in(people, transactional_db):
    """The INSERT claim loses races cleanly: 12 threads, one CLAIMED, the rest 409."""
    from agentplatform.api.idempotency import IdempotencyKeyInProgress, http_idempotency_claim

    requester = people["acme"]["requester"]
    barrier = threading.Barrier(12)

    def claim(_):
        try:
            barrier.wait(10)
            http_idempotency_claim(user=requester, key="stampede", fingerprint="f" * 64)
            return "CLAIMED"
        except IdempotencyKeyInProgress:
            return "IN_PROGRESS"
        finally:
            connection.close()

    with ThreadPoolExecutor(12) as pool:
        results = list(pool.map(claim, range(12)))
    assert results.count("CLAIMED") == 1 and results.count("IN_PROGRESS") == 11
    assert HttpIdempotencyKey.objects.filter(key="stampede").count() == 1
