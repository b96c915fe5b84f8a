"""Shared fixtures: demo personas (seeded through the same service the demo uses) and the skip
rules for tests that need PostgreSQL, a broker + worker, or a browser."""
from __future__ import annotations

import os
import shutil

import pytest


def _postgres() -> bool:
    from django.db import connection

    return connection.vendor == "postgresql"  # Django's backend or agentplatform.pgbackend


def pytest_collection_modifyitems(config, items) -> None:
    reasons = {
        "postgres": None if _postgres() else "needs PostgreSQL: set DATABASE_URL=postgres://... (.ci/run does)",
        "services": None if os.environ.get("CELERY_BROKER_URL", "").startswith("redis://") and _postgres()
        else "needs PostgreSQL and Redis: set DATABASE_URL and CELERY_BROKER_URL=redis://... (.ci/run does)",
        "browser": None if shutil.which(os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium"))
        else "needs Debian's chromium at /usr/bin/chromium (.ci/run installs it)",
    }
    for item in items:
        for mark, reason in reasons.items():
            if reason and item.get_closest_marker(mark):
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session", autouse=True)
def _flush_around_the_audit_truncate_trigger():
    """PostgreSQL refuses TRUNCATE of the audit trail (audit migration 0004), and pytest-django
    empties the database after each `transactional_db` test with `flush` (TRUNCATE). The test
    harness connects as a superuser, so it flushes with `session_replication_role = replica`,
    which skips ordinary triggers; the application's own role cannot (docs/operations.md)."""
    if not _postgres():
        yield
        return
    from django.db.backends.postgresql.operations import DatabaseOperations

    original = DatabaseOperations.execute_sql_flush

    def execute_sql_flush(self, sql_list):
        with self.connection.cursor() as cursor:
            cursor.execute("SET session_replication_role = replica")
        try:
            original(self, sql_list)
        finally:
            with self.connection.cursor() as cursor:
                cursor.execute("SET session_replication_role = DEFAULT")

    DatabaseOperations.execute_sql_flush = execute_sql_flush
    yield
    DatabaseOperations.execute_sql_flush = original


@pytest.fixture(autouse=True)
def _empty_cache():
    """Throttle counters and audit samples live in the cache: every test starts from zero."""
    from django.core.cache import cache

    cache.clear()
    yield


@pytest.fixture(autouse=True)
def _offline_model(settings):
    """Every test talks to the offline model unless it points LLM_* at its own fake server."""
    settings.LLM_API_KEY = ""
    settings.CELERY_TASK_ALWAYS_EAGER = True
    # Seeding ten personas with PBKDF2 costs seconds per test; the hasher is not under test.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    yield


@pytest.fixture(autouse=True)
def _notifications_inline(monkeypatch):
    """Without a broker, notifications run in a daemon thread (notifications.dispatch.dispatch);
    tests run them in the committing thread instead, so they finish before the test looks."""
    monkeypatch.setattr("notifications.dispatch.EAGER_IN_THREAD", False)
    yield


@pytest.fixture(autouse=True)
def _broker_tried_afresh():
    """A test that found the broker down must not make the next one skip it (core.broker)."""
    from core import broker

    broker.retry_now()
    yield
    broker.retry_now()


@pytest.fixture
def people(db):
    """{tenant slug: {persona: user}} for tenants acme and globex (see agentplatform.runtime.demo.seed)."""
    from agentplatform.runtime.demo.seed import seed_demo

    return seed_demo()


@pytest.fixture
def requester(people):
    return people["acme"]["requester"]


@pytest.fixture
def nobody(people):
    return people["acme"]["nobody"]


@pytest.fixture
def approver1(people):
    return people["acme"]["approver1"]


@pytest.fixture
def approver2(people):
    return people["acme"]["approver2"]


@pytest.fixture
def acme_admin(people):
    return people["acme"]["admin"]


@pytest.fixture
def acme_admin2(people):
    """acme's second tenant administrator: approves the first one's control changes."""
    return people["acme"]["admin2"]


@pytest.fixture
def operator(people):
    """The platform operator (superuser, no tenant)."""
    from agentplatform.runtime.demo.seed import platform_operator

    return platform_operator()


@pytest.fixture
def globex_admin(people):
    """The tenant administrator of globex."""
    return people["globex"]["admin"]


@pytest.fixture
def outsider(people):
    """A requester of the other tenant (globex) with the same permissions there."""
    return people["globex"]["requester"]


@pytest.fixture
def outsider_approver(people):
    return people["globex"]["approver1"]


@pytest.fixture
def scripted_model(settings):
    """Point the platform's model client at a FakeOpenAIServer; enqueue responses, read `.requests`.

    Streaming is on (the default), so enqueue `sse_response(...)` or plain JSON `completion(...)`
    bodies with `settings.LLM_STREAM = False`.
    """
    from agentplatform.llm.factory import reset_client
    from tests.llm.fake_openai_server import FakeOpenAIServer

    with FakeOpenAIServer() as server:
        settings.LLM_API_KEY = "sk-test-scripted"
        settings.LLM_BASE_URL = server.url
        settings.LLM_MAX_RETRIES = 0
        settings.LLM_STREAM = False
        reset_client()
        yield server
    reset_client()
