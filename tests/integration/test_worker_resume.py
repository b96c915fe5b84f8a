"""A real worker resumes runs after decisions, once: duplicate deliveries and racing approvers
execute each approved call exactly once."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from agentplatform.runtime import services
from agentplatform.runtime.models import Run
from approvals import approver_actions, requester_actions
from approvals.errors import ConfirmationAlreadyDecided
from approvals.models import ConfirmationRequest
from approvals.signals import confirmation_settled
from tests.integration.conftest import wait_for
from tools.catalog.models import Cancellation, Order, Refund

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

CANCEL_ORDER = "A202607290001"
REFUND_ORDER = "A202607290003"
FINISHED = (Run.Status.COMPLETED, Run.Status.FAILED)


def finished(run_id, worker) -> Run:
    """Poll the database until the worker finished the run; return it."""
    return wait_for(lambda: Run.objects.filter(pk=run_id, status__in=FINISHED).first(),
                    message=f"run {run_id} to finish", details=worker.tail)


def ask_for_refund(requester) -> tuple[Run, str]:
    outcome = services.chat_send(user=requester, message=f"refund {REFUND_ORDER} because it arrived broken")
    assert outcome.run.status == Run.Status.AWAITING_CONFIRMATION
    [pending] = outcome.pending
    assert (pending.tool, pending.needs, pending.quorum) == ("refund_order", "approvers", 2)
    return outcome.run, pending.confirmation_id


def test_approval_through_the_service_layer_is_resumed_by_a_real_worker(start_worker, requester, approver1,
                                                                          approver2):
    worker = start_worker()
    run, request_id = ask_for_refund(requester)

    approver_actions.confirmation_approve(request_id=request_id, approver=approver1, comment="checked")
    approver_actions.confirmation_approve(request_id=request_id, approver=approver2, comment="checked too")

    run = finished(run.pk, worker)
    assert run.status == Run.Status.COMPLETED, run.error_message
    assert "refund" in run.final_answer.lower()
    assert Refund.objects.filter(order__order_id=REFUND_ORDER).count() == 1
    assert Order.objects.get(tenant=requester.tenant, order_id=REFUND_ORDER).status == Order.Status.REFUNDED
    assert ConfirmationRequest.objects.get(pk=request_id).status == ConfirmationRequest.Status.CONSUMED
    # the worker did it (this process sends tasks to the broker and never resumed the run itself)
    # the worker logs "succeeded" just after the run's last commit: wait for the line, not only the row
    # (the worker also runs the notifications of the decision: count the resume task's lines only)
    wait_for(lambda: worker.count("'resumed'") >= 1, message="the task's log line", details=worker.tail)
    assert worker.count("runtime.resume_run[") == 2 and worker.count("'resumed'") == 1, worker.tail()


def test_the_same_resume_message_delivered_three_times_executes_once(broker, start_worker, requester):
    # given: a confirmed cancellation whose resume message waits in the broker (no worker yet)
    outcome = services.chat_send(user=requester, message=f"cancel {CANCEL_ORDER} because it is a duplicate")
    [pending] = outcome.pending
    requester_actions.confirmation_confirm(token=pending.token, user=requester)
    [message] = broker.queued()
    assert message["task"] == "runtime.resume_run" and str(outcome.run.pk) in message["args"]
    # and: the very same message (same task id, same delivery tag) twice more, as a redelivery makes it
    broker.duplicate(message["raw"], times=2)
    assert [m["id"] for m in broker.queued()] == [message["id"]] * 3

    # when: a worker with two pool processes takes them
    worker = start_worker(concurrency=2)

    # then: all three are delivered; one resumes the run, the other two find it taken
    run = finished(outcome.run.pk, worker)
    wait_for(lambda: worker.count("succeeded") == 3, message="three deliveries", details=worker.tail)
    assert worker.count(f"runtime.resume_run[{message['id']}] received") == 3, worker.tail()
    assert (worker.count("'resumed'"), worker.count("'skipped'")) == (1, 2), worker.tail()
    assert run.status == Run.Status.COMPLETED
    assert Cancellation.objects.count() == 1
    assert Order.objects.get(tenant=requester.tenant, order_id=CANCEL_ORDER).status == Order.Status.CANCELLED


def test_two_approvers_racing_for_the_last_quorum_slot_resume_once(broker, start_worker, requester, approver1,
                                                                   approver2, acme_admin):
    acme_admin.groups.add(*approver1.groups.all())  # a third approver (a tenant administrator holds no grant itself)
    worker = start_worker()
    run, request_id = ask_for_refund(requester)
    approver_actions.confirmation_approve(request_id=request_id, approver=approver1)  # first of two slots
    settled: list[str] = []

    def count_settles(sender, *, status, **kwargs) -> None:
        settled.append(status)

    confirmation_settled.connect(count_settles, dispatch_uid="test-count-settles")
    barrier = threading.Barrier(2)

    def decide(approver) -> str:
        try:
            barrier.wait(timeout=10)
            approver_actions.confirmation_approve(request_id=request_id, approver=approver)
            return "APPROVED"
        except ConfirmationAlreadyDecided:
            return "ALREADY_DECIDED"
        finally:
            connection.close()

    try:
        # when: two approvers take the last slot at the same moment
        with ThreadPoolExecutor(2) as pool:
            results = sorted(pool.map(decide, [approver2, acme_admin]))
    finally:
        confirmation_settled.disconnect(dispatch_uid="test-count-settles")

    # then: one decision counts, the other is told the request is already decided
    assert results == ["ALREADY_DECIDED", "APPROVED"]
    assert settled == [ConfirmationRequest.Status.CONFIRMED]
    run = finished(run.pk, worker)
    # one resume was enqueued and delivered, and the refund ran once
    assert not broker.queued()
    wait_for(lambda: worker.count("'resumed'") >= 1, message="the task's log line", details=worker.tail)
    assert worker.count("runtime.resume_run[") == 2 and worker.count("'resumed'") == 1, worker.tail()
    assert run.status == Run.Status.COMPLETED, run.error_message
    assert Refund.objects.filter(order__order_id=REFUND_ORDER).count() == 1
