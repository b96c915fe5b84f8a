"""POST /api/v1/chat/ with `Prefer: respond-async` answers 202 at once; the run
goes on in the background (a thread when eager, a worker with a broker)."""
from __future__ import annotations

import threading

import pytest

from agentplatform.runtime import background
from agentplatform.runtime.models import Run, RunEvent
from tests.api.conftest import CANCEL_ORDER

pytestmark = pytest.mark.django_db(transaction=True)


def test_respond_async_answers_202_and_the_run_finishes_in_the_background(api, requester, monkeypatch):
    # given: the background run cannot start until the response is back
    gate = threading.Event()
    original_thread = threading.Thread

    class GatedThread(original_thread):
        def run(self):
            gate.wait(10)
            super().run()

    monkeypatch.setattr(background.threading, "Thread", GatedThread)
    # when
    response = api(requester).post("/api/v1/chat/", {"message": "How many SKU-10001 are in stock in WH-HZ-01?"},
                                   format="json", HTTP_PREFER="respond-async")
    # then: 202 with the run, before the run did anything
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["status"] == "RUNNING"
    assert body["events_url"] == f"/api/v1/runs/{body['run_id']}/events/"
    assert body["run_url"] == response["Location"] == f"/api/v1/runs/{body['run_id']}/"
    assert response["Preference-Applied"] == "respond-async"
    assert not RunEvent.objects.filter(run_id=body["run_id"]).exists()
    # and the run completes in the background
    gate.set()
    background.join_background_runs()
    run = Run.objects.get(pk=body["run_id"])
    assert run.status == Run.Status.COMPLETED and "120" in run.final_answer
    assert list(RunEvent.objects.filter(run=run).values_list("type", flat=True))[-1] == "DONE"


def test_without_prefer_the_answer_is_the_blocking_form(api, requester):
    response = api(requester).post("/api/v1/chat/", {"message": "How many SKU-10001 are in stock in WH-HZ-01?"},
                                   format="json")
    assert response.status_code == 200
    assert response.json()["status"] == "COMPLETED" and "Preference-Applied" not in response


def test_a_confirmation_waits_and_its_token_is_fetched_separately(api, requester):
    client = api(requester)
    response = client.post("/api/v1/chat/", {"message": f"Please cancel order {CANCEL_ORDER} because it is late"},
                           format="json", HTTP_PREFER="respond-async, wait=5")
    assert response.status_code == 202
    background.join_background_runs()
    run = client.get(response.json()["run_url"]).json()
    assert run["status"] == "AWAITING_CONFIRMATION" and run["pending"][0]["tool"] == "cancel_order"
    token = client.post(f"/api/v1/confirmations/{run['pending'][0]['confirmation_id']}/token/", {}, format="json")
    assert token.status_code == 200 and token.json()["token"].startswith("ct_")


def test_invalid_input_is_refused_before_anything_starts(api, requester):
    response = api(requester).post("/api/v1/chat/", {"message": "   "}, format="json", HTTP_PREFER="respond-async")
    assert response.status_code == 400
    assert not Run.objects.exists()


def test_with_a_broker_the_run_is_enqueued_on_commit(api, requester, settings, monkeypatch):
    from agentplatform.runtime import tasks

    settings.CELERY_TASK_ALWAYS_EAGER = False
    sent = []
    monkeypatch.setattr(tasks.resume_run, "delay_on_commit", lambda run_id: sent.append(run_id))
    response = api(requester).post("/api/v1/chat/", {"message": "hello"}, format="json", HTTP_PREFER="respond-async")
    assert response.status_code == 202
    assert sent == [response.json()["run_id"]]
    run = Run.objects.get(pk=sent[0])
    assert run.status == Run.Status.RUNNING and run.lease_expires_at is None  # parked: a worker claims it


def test_the_schema_documents_prefer_and_202(api, requester):
    schema = api(requester).get("/api/schema/?format=json").json()
    operation = schema["paths"]["/api/v1/chat/"]["post"]
    assert "202" in operation["responses"]
    assert any(p["name"] == "Prefer" and p["in"] == "header" for p in operation["parameters"])
