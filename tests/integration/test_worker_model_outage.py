"""A model outage during a background resume: the worker retries with backoff a bounded number of
times, never repeats the approved call, and the last attempt fails the run with MODEL_UNAVAILABLE."""
from __future__ import annotations

import socket

import pytest

from agentplatform.runtime import services
from agentplatform.runtime.models import Run
from approvals import requester_actions
from tests.integration.conftest import wait_for
from tools.catalog.models import Cancellation

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

ORDER = "A202607290001"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_model_outage_is_retried_with_backoff_then_fails_the_run_once(start_worker, requester):
    # given: a worker whose model endpoint refuses connections, allowed two retries one second apart
    worker = start_worker(env={
        "LLM_API_KEY": "sk-test", "LLM_BASE_URL": f"http://127.0.0.1:{closed_port()}/v1", "LLM_MAX_RETRIES": "0",
        "CELERY_RESUME_MAX_RETRIES": "2", "CELERY_RESUME_RETRY_BACKOFF": "1", "CELERY_RESUME_RETRY_BACKOFF_MAX": "1",
    })
    # when: a confirmed cancellation is resumed by that worker (this process uses the offline model)
    outcome = services.chat_send(user=requester, message=f"cancel {ORDER} because it was a mistake")
    requester_actions.confirmation_confirm(token=outcome.pending[0].token, user=requester)

    # then: three attempts (the first and two retries), then the run fails with MODEL_UNAVAILABLE
    run = wait_for(lambda: Run.objects.filter(pk=outcome.run.pk, status=Run.Status.FAILED).first(),
                   message="the run to fail", details=worker.tail)
    assert run.error_code == "MODEL_UNAVAILABLE"
    wait_for(lambda: worker.count("succeeded"), message="the last attempt to end", details=worker.tail)
    assert worker.count("retry: Retry in") == 2, worker.tail()
    assert worker.count("] received") == 3 and worker.count("succeeded") == 1, worker.tail()
    # and the approved call ran once, before the model was needed, not once per attempt
    assert Cancellation.objects.count() == 1
