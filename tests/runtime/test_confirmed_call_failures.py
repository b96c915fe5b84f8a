"""A confirmed call whose execution raises, or that cannot go out, never leaves its confirmation
CONFIRMED ("approved, waiting to run") on a finished run (docs/decisions.md, "Terminal states"):
the human's decision is reported as what happened to it. The attempt's writes are rolled back and
a replayed consumption runs nothing.
"""
from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from agentplatform.runtime import services
from agentplatform.runtime.models import Run
from approvals.models import ConfirmationRequest
from approvals.selectors import outcome_of
from audit import events as audit_events
from audit.models import AuditEvent
from tests.tools.support import ORDER, audit_rows, install_tool, model, tool_context  # noqa: F401 - fixtures
from tools.catalog.models import Order
from tools.context import ToolContext
from tools.manager import ToolCallingManager
from tools.registry import ToolSpec

entered: list[str] = []


class Ledger(Exception):
    """A tool's own infrastructure error, configured to propagate in one case."""


class Attempt(BaseModel):
    model_config = ConfigDict(extra="forbid")
    order_id: str
    mode: str


def _write_then_fail(ctx: ToolContext, params: Attempt) -> dict[str, Any]:
    entered.append(params.mode)
    Order.objects.filter(tenant_id=ctx.tenant_id, order_id=params.order_id).update(status=Order.Status.CANCELLED)
    if params.mode == "crash":
        raise RuntimeError("unexpected None in the ledger client")
    if params.mode == "ledger":
        raise Ledger("ledger at 10.0.0.7 refused the connection")
    if params.mode == "value":
        raise ValueError("bad ledger row")
    return {"order_id": params.order_id}


def _precheck_crashes(ctx: ToolContext, params: Attempt) -> None:
    if params.mode == "precheck" and ctx.confirmations:
        raise KeyError("the precheck's lookup table is gone")


RISKY = ToolSpec(name="test_risky_write", description="Writes, then fails (test tool).", parameters=Attempt,
                 execute=_write_then_fail, precheck=_precheck_crashes, risk="HIGH")


@pytest.fixture(autouse=True)
def _reset():
    entered.clear()


def _confirm_and_resume(requester, model, mode: str, *, spec: ToolSpec = RISKY, call_id: str = "call_r"):
    """Start a run whose model calls the HIGH tool `spec`; returns (first outcome, its pending
    call, a function that confirms it with the token and resumes the run)."""
    model.calls((call_id, spec.name, {"order_id": ORDER, "mode": mode}))
    model.says("The attempt is over.")
    first = services.chat_send(user=requester, message="cancel it")
    [pending] = first.pending
    assert pending.token and not entered  # nothing ran before the decision
    return first, pending, lambda: services.chat_send(user=requester, message="", conversation_id=first.run.conversation_id,
                                                      confirmation_token=pending.token)


def _no_open_request(run_id) -> None:
    left = ConfirmationRequest.objects.filter(run_id=run_id, status__in=(ConfirmationRequest.Status.PENDING,
                                                                         ConfirmationRequest.Status.CONFIRMED))
    assert not left.exists(), [(r.pk, r.status) for r in left]


@pytest.mark.parametrize("mode", ["crash", "value"])
def test_a_confirmed_call_that_crashes_spends_its_confirmation_as_failed(requester, model, install_tool, mode):
    install_tool(RISKY, users=[requester])
    _first, pending, confirm = _confirm_and_resume(requester, model, mode)

    final = confirm()

    # the model is told the call failed; the run completes; the attempt's write is gone
    assert final.run.status == Run.Status.COMPLETED
    answer = model.tool_answers(1)["call_r"]
    assert (answer["success"], answer["code"]) == (False, "TOOL_EXECUTION_FAILED")
    assert Order.objects.get(tenant=requester.tenant, order_id=ORDER).status == Order.Status.PAID
    # the decision is reported as spent on a failed attempt, not as still waiting to run
    request = ConfirmationRequest.objects.get(pk=pending.confirmation_id)
    assert (request.status, request.outcome_code) == (ConfirmationRequest.Status.CONSUMED, "TOOL_EXECUTION_FAILED")
    assert request.consumed_at is not None
    assert outcome_of(request)["label"] == "FAILED (TOOL_EXECUTION_FAILED)"
    _no_open_request(final.run.pk)
    [row] = audit_rows(tool_call_id="call_r", decision="FAILED")
    assert row.confirmation_id == request.pk and row.status == "TOOL_EXECUTION_FAILED"
    assert entered == [mode]

    # and: consuming the same confirmation again runs nothing (it is spent)
    ctx = tool_context(requester, final.run.conversation_id, confirmations={"call_r": pending.confirmation_id})
    again = ToolCallingManager().execute_tool_calls(ctx, {"role": "assistant", "tool_calls": [{
        "id": "call_r", "type": "function",
        "function": {"name": RISKY.name, "arguments": f'{{"order_id": "{ORDER}", "mode": "{mode}"}}'}}]})
    assert (again.outcomes[0].result.success, again.outcomes[0].result.code) == (False, "CONFIRMATION_INVALID")
    assert entered == [mode]


def test_a_confirmed_call_whose_precheck_crashes_is_refused_not_consumed(requester, model, install_tool):
    install_tool(RISKY, users=[requester])
    _first, pending, confirm = _confirm_and_resume(requester, model, "precheck")

    final = confirm()

    assert final.run.status == Run.Status.COMPLETED and entered == []
    request = ConfirmationRequest.objects.get(pk=pending.confirmation_id)
    # the tool was never entered: nothing ran, so the request is REFUSED (not CONSUMED) with the code
    assert (request.status, request.outcome_code) == (ConfirmationRequest.Status.REFUSED, "TOOL_EXECUTION_FAILED")
    assert outcome_of(request)["label"] == "REFUSED (TOOL_EXECUTION_FAILED)"
    _no_open_request(final.run.pk)


@pytest.mark.parametrize(("mode", "error", "propagate", "code"), [
    ("ledger", Ledger, [f"{__name__}.Ledger"], "SYSTEM_ERROR"),
    ("crash", RuntimeError, ["builtins.RuntimeError"], "SYSTEM_ERROR"),
])
def test_a_confirmed_call_whose_error_reaches_the_caller_is_spent_too(requester, model, install_tool, settings,
                                                                      mode, error, propagate, code):
    settings.TOOLS_PROPAGATE_EXCEPTIONS = propagate
    install_tool(RISKY, users=[requester])
    _first, pending, confirm = _confirm_and_resume(requester, model, mode)

    # the confirm's own answer is the run as it stands (the decision committed; the resume failed)
    outcome = confirm()

    run = Run.objects.get(pk=outcome.run.pk)
    assert run.status == Run.Status.FAILED
    request = ConfirmationRequest.objects.get(pk=pending.confirmation_id)
    # not CANCELLED/RUN_ENDED ("ended while it waited"): it ran and failed
    assert (request.status, request.outcome_code) == (ConfirmationRequest.Status.CONSUMED, code)
    assert outcome_of(request)["outcome"] == "FAILED"
    assert Order.objects.get(tenant=requester.tenant, order_id=ORDER).status == Order.Status.PAID
    _no_open_request(run.pk)
    assert entered == [mode]


# -- a tool's database error, and a duplicate call of the same turn -----------------------------------

def _write_then_integrity_error(ctx: ToolContext, params: Attempt) -> dict[str, Any]:
    from django.db import IntegrityError

    entered.append(params.mode)
    Order.objects.filter(tenant_id=ctx.tenant_id, order_id=params.order_id).update(status=Order.Status.CANCELLED)
    raise IntegrityError('duplicate key value violates unique constraint "ledger_pkey"')


DB_ERROR = ToolSpec(name="test_db_error_write", description="Writes, then hits an IntegrityError (test tool).",
                    parameters=Attempt, execute=_write_then_integrity_error, risk="HIGH")


def test_a_database_error_the_savepoint_contained_spends_the_confirmation_as_failed(requester, model, install_tool):
    # given: a confirmed call whose tool raises a DatabaseError (it reaches the caller)
    install_tool(DB_ERROR, users=[requester])
    first, pending, confirm = _confirm_and_resume(requester, model, "db", spec=DB_ERROR, call_id="call_db")

    confirm()

    # then: the run ends FAILED, and the request says it ran and failed, not "ended while it waited"
    request = ConfirmationRequest.objects.get(pk=pending.confirmation_id)
    assert Run.objects.get(pk=first.run.pk).status == Run.Status.FAILED and entered == ["db"]
    assert (request.status, request.outcome_code) == (ConfirmationRequest.Status.CONSUMED, "SYSTEM_ERROR")
    assert outcome_of(request)["outcome"] == "FAILED"
    assert Order.objects.get(tenant=requester.tenant, order_id=ORDER).status == Order.Status.PAID
    [failed] = audit_rows(tool_call_id="call_db", decision="FAILED")
    assert failed.confirmation_id == request.pk


def test_two_gated_calls_one_fine_one_crashing_each_end_as_they_ran(requester, model, install_tool):
    install_tool(RISKY, users=[requester])
    model.calls(("c1", RISKY.name, {"order_id": ORDER, "mode": "fine"}),
                ("c2", RISKY.name, {"order_id": ORDER, "mode": "crash"}),
                ("c3", RISKY.name, {"order_id": ORDER, "mode": "crash"}))  # identical to c2: shares its request
    model.says("over")
    first = services.chat_send(user=requester, message="go")
    for pending in first.pending:
        if pending.token:
            services.chat_send(user=requester, message="", conversation_id=first.run.conversation_id,
                               confirmation_token=pending.token)

    run = Run.objects.get(pk=first.run.pk)
    assert run.status == Run.Status.COMPLETED
    by_call = {r.tool_call_id: r for r in ConfirmationRequest.objects.filter(run_id=run.pk)}
    assert (by_call["c1"].status, by_call["c1"].outcome_code) == ("CONSUMED", "OK")
    assert (by_call["c2"].status, by_call["c2"].outcome_code) == ("CONSUMED", "TOOL_EXECUTION_FAILED")
    _no_open_request(run.pk)
    answers = model.tool_answers(1)
    assert answers["c1"]["success"] and answers["c2"]["code"] == answers["c3"]["code"] == "TOOL_EXECUTION_FAILED"
    assert entered.count("crash") == 1  # the identical call did not run the tool again
    # the duplicate's audit row is linked to the decision it was answered from
    [duplicate] = [r for r in audit_rows(tool_call_id="c3") if r.decision != "CONFIRMATION_REQUIRED"]
    assert duplicate.confirmation_id == by_call["c2"].pk and duplicate.status == "TOOL_EXECUTION_FAILED"


# -- the run's row before the request's: a cancel racing a failing confirmed call (PostgreSQL) -------

race: dict[str, Any] = {}


def _crash_while_cancelled(ctx: ToolContext, params: Attempt) -> dict[str, Any]:
    import threading
    import time

    from django.db import connection

    def cancel():
        try:
            race["cancel"] = services.run_cancel(run_id=ctx.run_id, actor=race["user"], reason="stop")
        except BaseException as error:  # noqa: BLE001 - reported by the test
            race["cancel"] = error
        finally:
            connection.close()

    race["thread"] = threading.Thread(target=cancel)
    race["thread"].start()
    time.sleep(0.5)  # the tool's own work; the cancel waits for the run row the fence locked
    raise RuntimeError("ledger client crashed")


CANCELLED_MEANWHILE = ToolSpec(name="test_crash_cancel", description="Crashes while its run is cancelled (test tool).",
                               parameters=Attempt, execute=_crash_while_cancelled, risk="HIGH")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_cancel_racing_a_crashing_confirmed_call_wins_without_a_deadlock(requester, model, install_tool):
    # given: a confirmed call whose tool, while it works, has its run cancelled by the requester
    race.clear()
    race["user"] = requester
    install_tool(CANCELLED_MEANWHILE, users=[requester])
    first, _pending, confirm = _confirm_and_resume(requester, model, "crash", spec=CANCELLED_MEANWHILE,
                                                   call_id="call_x")

    # when: the tool crashes (its consumption rolls back) while the cancel waits for the run's row
    confirm()
    race["thread"].join(30)

    # then: the cancel succeeded (no deadlock between the run's row and the request's), the run is
    # CANCELLED and not completed by the model, and the request is closed either way
    assert not isinstance(race.get("cancel"), BaseException), race.get("cancel")
    run = Run.objects.get(pk=first.run.pk)
    assert run.status == Run.Status.CANCELLED and not run.final_answer
    _no_open_request(run.pk)


# -- found by a review: an exception whose `code` is not ours; a refusal whose audit write fails ----

def _http_error(ctx: ToolContext, params: Attempt) -> dict[str, Any]:
    import urllib.error

    entered.append(params.mode)
    raise urllib.error.HTTPError("https://ledger.example/x", 503, "busy", {}, None)  # an OSError, code 503 (int)


HTTP_ERROR = ToolSpec(name="test_http_error", description="Raises urllib's HTTPError (test tool).",
                      parameters=Attempt, execute=_http_error, risk="HIGH")


def test_a_propagated_error_with_a_numeric_code_is_spent_and_audited(requester, model, install_tool):
    install_tool(HTTP_ERROR, users=[requester])
    _first, pending, confirm = _confirm_and_resume(requester, model, "http", spec=HTTP_ERROR, call_id="call_h")

    confirm()

    request = ConfirmationRequest.objects.get(pk=pending.confirmation_id)
    assert (request.status, request.outcome_code) == (ConfirmationRequest.Status.CONSUMED, "SYSTEM_ERROR")
    [failed] = audit_rows(tool_call_id="call_h", decision="FAILED")
    assert failed.status == "SYSTEM_ERROR" and failed.confirmation_id == request.pk


def _refused_at_consume(ctx: ToolContext, params: Attempt) -> None:
    from tools.errors import ToolBusinessError

    if ctx.confirmations:
        raise ToolBusinessError("order already shipped", code="ORDER_SHIPPED")


REFUSED_AT_CONSUME = ToolSpec(name="test_refused_at_consume", description="Refused by its precheck at consume time.",
                              parameters=Attempt, execute=_write_then_fail, precheck=_refused_at_consume, risk="HIGH")


def test_a_refusal_and_its_audit_row_commit_together(requester, model, install_tool, monkeypatch):
    # given: the refusal's audit write fails with an error the step would otherwise keep going past
    install_tool(REFUSED_AT_CONSUME, users=[requester])
    _first, pending, confirm = _confirm_and_resume(requester, model, "fine", spec=REFUSED_AT_CONSUME, call_id="call_q")
    real = audit_events._request_event

    def failing(decision, request, **kwargs):
        if decision == "REFUSED":
            raise RuntimeError("audit chain hiccup")
        return real(decision, request, **kwargs)

    monkeypatch.setattr(audit_events, "_request_event", failing)

    confirm()

    # then: the request did not become REFUSED without its audit row; it is closed with one
    request = ConfirmationRequest.objects.get(pk=pending.confirmation_id)
    rows = list(AuditEvent.objects.filter(confirmation_id=request.pk).values_list("decision", "status"))
    assert request.status != ConfirmationRequest.Status.REFUSED, rows
    assert request.status not in (ConfirmationRequest.Status.PENDING, ConfirmationRequest.Status.CONFIRMED)
    assert (("CANCELLED", request.outcome_code) in rows), (request.status, request.outcome_code, rows)
