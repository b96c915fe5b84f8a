"""Helpers of the policy bundle tests: apply a bundle to a tenant, run one call through the pipeline."""
from __future__ import annotations

import json
import textwrap
import uuid
from typing import Any

from policies.services import Applied, bundle_apply
from tests.tools.support import assistant, tool_context
from tools.calls import CallOutcome
from tools.manager import ToolCallingManager
from tools.policy_catalog import catalog

EXAMPLE = textwrap.dedent('''\
    version: 1
    cedar: |
      @id("refunds-over-500-need-three")
      @gate("approval") @quorum("3")
      permit (principal, action == Action::"refund_order", resource)
      when { context.arguments.amount.greaterThan(decimal("500.00")) };

      @id("no-refund-over-5000")
      @reason("Refunds over 5,000 are handled by finance, not the assistant")
      forbid (principal, action == Action::"refund_order", resource)
      when { context.arguments.amount.greaterThan(decimal("5000.00")) };
    ''')


def apply(tenant_id: int, text: str, actor=None) -> Applied:
    """Apply `text` as the tenant's next bundle version (validated against the live catalog)."""
    return bundle_apply(tenant_id=tenant_id, text=text, catalog=catalog(), actor=actor)


def call(user, tool: str, arguments: dict[str, Any], *, conversation_id: uuid.UUID | None = None,
         call_id: str = "call_1") -> CallOutcome:
    """Run one model call of `tool` through the governed pipeline as `user`; its outcome."""
    ctx = tool_context(user, conversation_id or uuid.uuid4())
    manager = ToolCallingManager()
    result = manager.execute_tool_calls(ctx, assistant((call_id, tool, json.dumps(arguments))))
    return result.outcomes[0]
