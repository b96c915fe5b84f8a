"""Benchmark data: the demo personas (seeded with `seed_demo`), bench-only orders and conversations,
and a reset that removes what a previous benchmark left behind, so every script can be re-run.

Only bench artefacts are touched: orders whose id starts with BENCH_ORDER_PREFIX ("A9"; the demo's
are A2026...), conversations titled "bench: ..." with their runs, messages, confirmation requests
and approvals, and the idempotency records those conversations (or the bench-only tools) created.
Audit events are append-only (PostgreSQL refuses to delete them) and stay.
"""
from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

BENCH_ORDER_PREFIX = "A9"
BENCH_TITLE = "bench: "
BENCH_TOOL_PREFIX = "bench_"


def personas() -> dict[str, Any]:
    """Seed (idempotently) and return the acme personas: requester, nobody, approver1, approver2, admin."""
    from agentplatform.runtime.demo.seed import seed_demo

    return seed_demo()["acme"]


def reset(*, tenant) -> None:
    """Delete the bench artefacts of `tenant` (see the module docstring). Demo data is left alone."""
    from django.db import transaction

    from agentplatform.runtime.models import Conversation, Run
    from approvals.models import Approval, ConfirmationRequest
    from audit.models import AuditEvent
    from tools.catalog.models import Order
    from tools.models import IdempotencyRecord

    with transaction.atomic():
        conversations = Conversation.objects.filter(tenant=tenant, title__startswith=BENCH_TITLE)
        conversation_ids = list(conversations.values_list("id", flat=True))
        keys = set(AuditEvent.objects.filter(tenant=tenant, conversation_id__in=conversation_ids)
                   .exclude(idempotency_key="").values_list("idempotency_key", flat=True))
        records = IdempotencyRecord.objects.filter(tenant=tenant)
        key_list = sorted(keys)
        for start in range(0, len(key_list), 1000):
            records.filter(key__in=key_list[start:start + 1000]).delete()
        records.filter(tool_name__startswith=BENCH_TOOL_PREFIX).delete()
        requests = ConfirmationRequest.objects.filter(tenant=tenant, conversation_id__in=conversation_ids)
        Approval.objects.filter(request__in=requests).delete()
        requests.delete()
        Run.objects.filter(conversation__in=conversations).delete()  # messages and events cascade
        conversations.delete()
        Order.objects.filter(tenant=tenant, order_id__startswith=BENCH_ORDER_PREFIX).delete()  # cancellations, refunds


def orders_create(*, tenant, count: int, start: int = 1) -> list[str]:
    """Create `count` PAID bench orders (ids A9 + 11 digits from `start`). Returns their ids."""
    from tools.catalog.models import Order

    ids = [f"{BENCH_ORDER_PREFIX}{n:011d}" for n in range(start, start + count)]
    Order.objects.bulk_create([
        Order(tenant=tenant, order_id=order_id, status=Order.Status.PAID, amount=Decimal("100.00"),
              customer_name="Bench Customer", customer_phone="13800000000", shipping_address="Bench Road 1")
        for order_id in ids
    ])
    return ids


def conversation(*, user, label: str):
    """A new bench conversation of `user` (created through the runtime service)."""
    from agentplatform.runtime.services import conversation_create

    return conversation_create(user=user, title=f"{BENCH_TITLE}{label}")


def tool_context(*, user, conversation_id: uuid.UUID, run_id: uuid.UUID | None = None,
                 confirmations: dict[str, uuid.UUID] | None = None):
    """A server-side ToolContext as the agent loop builds it, offered tools included."""
    from tools.context import ToolContext
    from tools.manager import ToolCallingManager

    ctx = ToolContext(tenant=user.tenant, user=user, conversation_id=conversation_id, run_id=run_id,
                      request_id="bench", confirmations=dict(confirmations or {}))
    names = frozenset(d["function"]["name"] for d in ToolCallingManager().resolve_definitions(ctx))
    return ctx.with_offered(names)


def assistant_message(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """An OpenAI assistant message proposing one tool call."""
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]}


def cancel_arguments(order_id: str) -> str:
    import json

    return json.dumps({"order_id": order_id, "reason": "bench: customer changed their mind"})


class ConfirmedCall:
    """A cancel_order call gated by the pipeline and confirmed by the requester's token, not consumed yet.

    call_id / message: the proposed call as the model sent it; request_id: its ConfirmationRequest.
    """

    def __init__(self, *, order_id: str, call_id: str, message: dict[str, Any], request_id: uuid.UUID) -> None:
        self.order_id, self.call_id, self.message, self.request_id = order_id, call_id, message, request_id


def confirmed_calls(*, user, conversation_id: uuid.UUID, order_ids: list[str]) -> list[ConfirmedCall]:
    """For each order: propose cancel_order through the pipeline (CONFIRMATION_REQUIRED with a token),
    then confirm the token through `confirmation_confirm`. The requests carry no run (they are
    consumed by calling the pipeline directly), so no resume is enqueued."""
    from approvals import requester_actions
    from tools.manager import ToolCallingManager

    manager, ctx, calls = ToolCallingManager(), tool_context(user=user, conversation_id=conversation_id), []
    for order_id in order_ids:
        call_id = f"call_{order_id}"
        message = assistant_message(call_id, "cancel_order", cancel_arguments(order_id))
        pending = manager.execute_tool_calls(ctx, message).pending
        if len(pending) != 1 or not pending[0].token:
            raise RuntimeError(f"cancel_order for {order_id} was not gated for the requester's confirmation")
        requester_actions.confirmation_confirm(token=pending[0].token, user=user)
        calls.append(ConfirmedCall(order_id=order_id, call_id=call_id, message=message,
                                   request_id=uuid.UUID(pending[0].confirmation_id)))
    return calls


def consume(*, user, conversation_id: uuid.UUID, call: ConfirmedCall):
    """Execute a confirmed call through the pipeline by consuming its confirmation (what a resume
    does). Returns the call's ToolResult."""
    from tools.context import ToolContext
    from tools.manager import ToolCallingManager

    # As the resume builds it (loop.build_tool_context): no `offered` filter, so the pipeline
    # re-checks every grant at consumption; the definitions are not computed for a consume.
    ctx = ToolContext(tenant=user.tenant, user=user, conversation_id=conversation_id, request_id="bench",
                      confirmations={call.call_id: call.request_id})
    return ToolCallingManager().execute_tool_calls(ctx, call.message, only={call.call_id}).outcomes[0].result
