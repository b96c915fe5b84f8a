"""Retention never deletes work in progress: a run that waits for a decision, its conversation,
messages and events, and its PENDING request stay, however old; finished conversations go, and
decided requests are archived (with their approvals, without the raw arguments or token digest)
before they are deleted. Another tenant's records stay. State is built through the services with
the offline model."""
from __future__ import annotations

import json
import uuid

from agentplatform.retention.services import retention_run
from agentplatform.runtime import services
from agentplatform.runtime.models import Conversation, Message, Run, RunEvent
from approvals import approver_actions
from approvals.models import Approval, ConfirmationRequest
from audit.models import RetentionArchive
from core import clock
from tests.retention.support import DAY
from tests.tools.support import ORDER, REFUND_ORDER

Status = ConfirmationRequest.Status


def _days(settings) -> None:
    settings.RETENTION_RUN_EVENT_DAYS = 30
    settings.RETENTION_CONVERSATION_DAYS = 180
    settings.RETENTION_REQUEST_DAYS = 365
    settings.RETENTION_AUDIT_DAYS = 0  # the audit part has its own tests


def test_waiting_work_is_kept_and_finished_work_archived_then_deleted(requester, approver1, outsider, settings,
                                                                      tmp_path, django_capture_on_commit_callbacks):
    # given: a run waiting for the requester, and a refund an approver rejected (its run finished)
    _days(settings)
    waiting = services.chat_send(user=requester, message=f"cancel {ORDER} because the customer changed their mind")
    [pending] = waiting.pending
    refund = services.chat_send(user=requester, message=f"refund {REFUND_ORDER} amount 10 because the parcel broke")
    [gated] = refund.pending
    with django_capture_on_commit_callbacks(execute=True):
        approver_actions.confirmation_reject(request_id=uuid.UUID(gated.confirmation_id), approver=approver1,
                                             reason="no proof")
    assert Run.objects.get(pk=refund.run.pk).status == Run.Status.COMPLETED
    theirs = services.chat_send(user=outsider, message="hello")
    counts = (Conversation.objects.filter(tenant=outsider.tenant).count(),
              RunEvent.objects.filter(run__tenant_id=outsider.tenant_id).count())

    # when: retention runs 400 days later (everything is older than every class's retention)
    report = retention_run(tenant=requester.tenant, now=clock.now() + 400 * DAY, root=tmp_path)

    # then: the waiting run and everything it needs are kept
    run = Run.objects.get(pk=waiting.run.pk)
    assert run.status == Run.Status.AWAITING_CONFIRMATION
    assert Conversation.objects.filter(pk=run.conversation_id).exists()
    assert RunEvent.objects.filter(run=run).exists() and Message.objects.filter(run=run).exists()
    assert ConfirmationRequest.objects.get(pk=pending.confirmation_id).status == Status.PENDING
    # the finished conversation went with its run, events and messages
    assert not Conversation.objects.filter(pk=refund.run.conversation_id).exists()
    assert not Run.objects.filter(pk=refund.run.pk).exists()
    assert not Message.objects.filter(conversation_id=refund.run.conversation_id).exists()
    # the decided request was archived, then deleted with its approval
    assert not ConfirmationRequest.objects.filter(pk=gated.confirmation_id).exists()
    assert not Approval.objects.filter(request_id=gated.confirmation_id).exists()
    [archive] = RetentionArchive.objects.filter(tenant=requester.tenant, kind="REQUESTS")
    [line] = (tmp_path / archive.path).read_text(encoding="utf-8").splitlines()
    record = json.loads(line)
    assert record["request"]["id"] == gated.confirmation_id and record["request"]["status"] == Status.CANCELLED
    assert "arguments" not in record["request"] and "token_hash" not in record["request"]
    assert [(a["decision"], a["approver_id"], a["comment"]) for a in record["approvals"]] == [
        ("REJECT", approver1.pk, "no proof")]
    assert report.deleted["requests"] == 1 and report.deleted["conversations"] >= 1
    # the other tenant's records are untouched
    assert (Conversation.objects.filter(tenant=outsider.tenant).count(),
            RunEvent.objects.filter(run__tenant_id=outsider.tenant_id).count()) == counts
    assert Run.objects.filter(pk=theirs.run.pk).exists()


def test_a_second_run_and_a_dry_run_change_nothing_more(requester, approver1, settings, tmp_path,
                                                        django_capture_on_commit_callbacks):
    _days(settings)
    refund = services.chat_send(user=requester, message=f"refund {REFUND_ORDER} amount 10 because the parcel broke")
    [gated] = refund.pending
    with django_capture_on_commit_callbacks(execute=True):
        approver_actions.confirmation_reject(request_id=uuid.UUID(gated.confirmation_id), approver=approver1,
                                             reason="no proof")
    later = clock.now() + 400 * DAY
    due = retention_run(tenant=requester.tenant, now=later, root=tmp_path, dry_run=True)
    assert due.deleted["requests"] == 1 and due.deleted["conversations"] >= 1
    assert ConfirmationRequest.objects.filter(pk=gated.confirmation_id).exists()
    assert list(tmp_path.iterdir()) == []

    retention_run(tenant=requester.tenant, now=later, root=tmp_path)
    again = retention_run(tenant=requester.tenant, now=later, root=tmp_path)

    assert not any(again.deleted.values()) and again.archives == []
    assert RetentionArchive.objects.filter(tenant=requester.tenant, kind="REQUESTS").count() == 1


def test_run_events_of_a_finished_run_go_before_its_conversation(requester, settings, tmp_path):
    _days(settings)
    done = services.chat_send(user=requester, message="hello")
    assert Run.objects.get(pk=done.run.pk).status == Run.Status.COMPLETED
    events = RunEvent.objects.filter(run__tenant_id=requester.tenant_id).count()
    assert RunEvent.objects.filter(run=done.run).exists()

    report = retention_run(tenant=requester.tenant, now=clock.now() + 31 * DAY, root=tmp_path)

    assert report.deleted["run_events"] == events
    assert not RunEvent.objects.filter(run=done.run).exists()
    assert Conversation.objects.filter(pk=done.run.conversation_id).exists()
    assert Message.objects.filter(conversation_id=done.run.conversation_id).exists()
