"""/healthz (liveness) and /readyz (database, migrations, broker)."""
from __future__ import annotations

import pytest

from agentplatform.ops import health
from tests.api.conftest import api  # noqa: F401 - fixture


def test_healthz_answers_without_the_database(client, django_assert_num_queries, db):
    with django_assert_num_queries(0):
        response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_checks_database_and_migrations(client, db):
    response = client.get("/readyz")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "ok"
    assert set(body["checks"]) == {"database", "migrations"}  # eager: no broker to check
    assert all(check["status"] == "ok" for check in body["checks"].values())


def test_readyz_is_503_when_a_migration_is_missing(client, db, monkeypatch):
    # given: the migration plan is not empty (as after deploying code before `migrate`)
    monkeypatch.setattr(health.MigrationExecutor, "migration_plan", lambda self, targets: [("app", False)])
    # when
    response = client.get("/readyz")
    # then
    assert response.status_code == 503
    assert response.json()["checks"]["migrations"] == {"status": "error", "error": "RuntimeError",
                                                       "ms": response.json()["checks"]["migrations"]["ms"]}


def test_readyz_checks_the_broker_when_one_is_configured(client, db, settings):
    # given: a broker nobody listens on
    settings.CELERY_TASK_ALWAYS_EAGER = False
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["broker"]["status"] == "error"
    assert response.json()["checks"]["database"]["status"] == "ok"


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_probes_refuse_writes(client, db, path):
    assert client.post(path).status_code == 405
    # with CSRF enforced, as in a server: still 405, not CSRF's HTML 403 page (found by a probe)
    from django.test import Client

    assert Client(enforce_csrf_checks=True).post(path).status_code == 405


@pytest.mark.services
def test_readyz_is_200_with_a_reachable_broker(client, db, settings):
    import os

    settings.CELERY_TASK_ALWAYS_EAGER = False
    settings.CELERY_BROKER_URL = os.environ["CELERY_BROKER_URL"]
    response = client.get("/readyz")
    assert response.status_code == 200, response.content
    assert response.json()["checks"]["broker"]["status"] == "ok"


def test_readyz_answers_within_seconds_when_the_database_does_not(client, db, monkeypatch):
    # an unreachable database used to hold /readyz for the pool's
    # timeout twice (database, then migrations): 62 s
    import time

    from agentplatform.ops import health

    monkeypatch.setattr(health, "READYZ_CHECK_SECONDS", 0.5)
    monkeypatch.setattr(health, "check_database", lambda: time.sleep(5))
    started = time.monotonic()

    response = client.get("/readyz")

    assert time.monotonic() - started < 2.5
    body = response.json()
    assert response.status_code == 503
    assert body["checks"]["database"] == {"status": "error", "error": "CheckTimeout", "ms": body["checks"]["database"]["ms"]}
    assert body["checks"]["migrations"]["status"] == "skipped"


@pytest.mark.parametrize("path", ["/approvals/", "/approvals/mine/", "/chat/"])
def test_a_signed_in_users_pages_are_not_kept_by_browsers_or_proxies(client, requester, path):
    client.force_login(requester)
    response = client.get(path)

    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"] and "private" in response["Cache-Control"]


def test_api_answers_are_not_kept_either(api, requester):
    response = api(requester).get("/api/v1/tools/")

    assert response.status_code == 200 and "no-store" in response["Cache-Control"]


def test_anonymous_pages_and_static_files_keep_their_caching(client, db):
    assert "no-store" not in client.get("/accounts/password_reset/").get("Cache-Control", "")
    assert "public" in client.get("/static/js/api.js")["Cache-Control"]
