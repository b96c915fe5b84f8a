"""Tool execution eligibility: whether the loop executes a turn's tool calls itself or hands
them to the caller (user-controlled execution; the ToolExecutionEligibilityPredicate of Spring AI).

The loop asks `is_eligible(internal_enabled, turn)`; the predicate is a dotted path in
settings.AGENT_TOOL_EXECUTION_ELIGIBILITY and can be replaced.
"""
from __future__ import annotations

from django.conf import settings
from django.utils.module_loading import import_string

from agentplatform.llm.types import ModelTurn


def default_predicate(internal_tool_execution_enabled: bool, turn: ModelTurn) -> bool:
    """Execute tools when framework-controlled execution is on and the turn has tool calls."""
    return internal_tool_execution_enabled and turn.has_tool_calls


def is_eligible(internal_tool_execution_enabled: bool, turn: ModelTurn) -> bool:
    """Apply the configured predicate. Returns bool."""
    predicate = import_string(settings.AGENT_TOOL_EXECUTION_ELIGIBILITY)
    return bool(predicate(internal_tool_execution_enabled, turn))
