"""A raw confirmation token is shown once to the requesting client and goes nowhere else: not into
audit rows, run events, stored messages or run state, idempotency records, logs, or the model's
requests. Only its SHA-256 is stored."""
from __future__ import annotations

import json
import logging
import uuid

import pytest

from agentplatform.runtime import services
from agentplatform.runtime.models import Message, Run, RunEvent
from core.tokens import digest
from approvals import requester_actions
from approvals.errors import ConfirmationAlreadyDecided
from approvals.models import ConfirmationRequest
from audit.models import AuditEvent
from tests.tools.support import CANCEL_ARGS, ORDER, REFUND_ORDER
from tools.catalog.models import Cancellation
from tools.models import IdempotencyRecord


def _dump(model) -> str:
    return json.dumps(list(model.objects.values()), default=str, ensure_ascii=False)


def test_tokens_never_reach_storage_logs_or_the_model(requester, model, caplog):
    caplog.set_level(logging.DEBUG)
    events_seen: list[RunEvent] = []
    model.calls(("call_1", "cancel_order", CANCEL_ARGS))
    model.says("Cancelled.")
    model.calls(("call_2", "cancel_order", {"order_id": REFUND_ORDER, "reason": "duplicate"}))
    model.says("You declined.")
    model.calls(("call_3", "cancel_order", {"order_id": REFUND_ORDER, "reason": "duplicate again"}))
    model.says("Cancelled.")

    # a confirmed token, then replayed
    first = services.chat_send(user=requester, message=f"cancel {ORDER}", listener=events_seen.append)
    t1 = first.pending[0].token
    services.chat_send(user=requester, message="yes", conversation_id=first.run.conversation_id,
                       confirmation_token=t1, listener=events_seen.append)
    with pytest.raises(ConfirmationAlreadyDecided):
        requester_actions.confirmation_confirm(token=t1, user=requester)
    # a declined token
    second = services.chat_send(user=requester, message=f"cancel {REFUND_ORDER}")
    t2 = second.pending[0].token
    requester_actions.confirmation_cancel(token=t2, user=requester)
    services.run_continue(run_id=second.run.pk)
    # a token replaced by a fresh one, which is then confirmed
    third = services.chat_send(user=requester, message=f"cancel {REFUND_ORDER} again")
    t3 = third.pending[0].token
    t3_fresh = requester_actions.confirmation_issue_token(request_id=uuid.UUID(third.pending[0].confirmation_id),
                                                  user=requester)
    services.chat_send(user=requester, message="yes", conversation_id=third.run.conversation_id,
                       confirmation_token=t3_fresh)

    tokens = [t1, t2, t3, t3_fresh]
    assert len(set(tokens)) == 4 and all(t.startswith("ct_") and len(t) > 40 for t in tokens)
    assert Cancellation.objects.count() == 2  # the story really ran
    # positive control: what is stored is the digest, found by the same search
    stored = _dump(ConfirmationRequest)
    assert digest(t3_fresh) in stored and digest(t1) in stored

    places = {
        "audit rows": _dump(AuditEvent),
        "run events": _dump(RunEvent) + json.dumps([e.payload for e in events_seen], default=str),
        "messages": _dump(Message),
        "runs": _dump(Run),
        "idempotency records": _dump(IdempotencyRecord),
        "confirmation requests": stored,
        "model requests": json.dumps([r.body for r in model.requests], ensure_ascii=False),
        "logs": "\n".join(f"{r.getMessage()} {r.exc_text or ''}" for r in caplog.records),
    }
    for token in tokens:
        secret = token.removeprefix("ct_")
        leaks = [place for place, text in places.items() if secret in text]
        assert leaks == [], f"token found in {leaks}"


def test_a_url_password_in_a_message_is_not_stored(requester):
    from audit import events

    row = events.control_change_recorded(
        tenant_id=requester.tenant_id, status="SERVER_ADDED", masked_arguments={},
        message="server added at https://bob:hunter2@mcp.example.com/rpc?key=abc123 by admin")
    stored = AuditEvent.objects.get(pk=row.pk).message
    assert "hunter2" not in stored and "abc123" not in stored
    assert "mcp.example.com" in stored
