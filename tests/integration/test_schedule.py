"""The beat schedule (in settings) runs registered tasks with deliberate settings, and the
retention task keeps idempotency records at least 72 hours."""
from __future__ import annotations

import datetime

import pytest
from django.conf import settings

from core import clock
from agentplatform.celery import app
from tools.models import IdempotencyRecord
from tools.tasks import prune_idempotency_records

Status = IdempotencyRecord.Status


def test_every_scheduled_entry_names_a_registered_task():
    app.loader.import_default_modules()
    scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert {"approvals.expire_confirmations", "runtime.recover_stuck_runs",
            "tools.prune_idempotency_records"} <= scheduled
    assert scheduled <= set(app.tasks)


def test_late_acknowledgement_only_on_idempotent_tasks_and_visibility_above_the_longest_task():
    app.loader.import_default_modules()
    ours = ["runtime.resume_run", "runtime.recover_stuck_runs", "approvals.expire_confirmations",
            "tools.prune_idempotency_records"]
    for name in ours:  # each is idempotent in the database (docs/operations.md)
        task = app.tasks[name]
        assert task.acks_late and task.reject_on_worker_lost, name
        assert task.soft_time_limit < task.time_limit, name
    assert app.conf.task_acks_late is False  # the default for any task that is not
    longest = max(app.tasks[name].time_limit for name in ours)
    assert settings.CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"] > longest
    assert settings.CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"] > settings.CELERY_RESUME_RETRY_BACKOFF_MAX


@pytest.mark.django_db
def test_pruning_keeps_records_for_72_hours_and_never_prunes_unfinished_ones(people, monkeypatch):
    tenant = people["acme"]["requester"].tenant

    def record(key: str, status: str) -> IdempotencyRecord:
        return IdempotencyRecord.objects.create(tenant=tenant, key=key, tool_name="cancel_order",
                                                arguments_hash="a" * 64, status=status, locked_at=clock.now())

    done, failed = record("done", Status.SUCCEEDED), record("failed", Status.FAILED)
    unknown, processing = record("unknown", Status.OUTCOME_UNKNOWN), record("processing", Status.PROCESSING)
    created = done.created_at

    monkeypatch.setattr(clock, "now", lambda: created + datetime.timedelta(hours=71, minutes=59))
    assert prune_idempotency_records.delay().get() == 0

    monkeypatch.setattr(clock, "now", lambda: created + datetime.timedelta(hours=72, minutes=1))
    assert prune_idempotency_records.delay().get() == 2
    assert set(IdempotencyRecord.objects.values_list("key", flat=True)) == {unknown.key, processing.key}
    assert not IdempotencyRecord.objects.filter(pk__in=[done.pk, failed.pk]).exists()
