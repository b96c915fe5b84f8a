"""Errors raised by tools and the pipeline."""
from __future__ import annotations

from core.errors import DomainError, PermissionDeniedError


class ToolValidationError(DomainError):
    """A business rule on the arguments failed. Becomes INVALID_ARGUMENTS."""

    code = "INVALID_ARGUMENTS"


class ToolBusinessError(DomainError):
    """The business refused the action (for example: the order has shipped).

    Becomes a failure ToolResult with this `code` for the model to explain; not propagated.
    """

    code = "BUSINESS_RULE_VIOLATION"


class ToolPermissionDenied(PermissionDeniedError):
    """The user may not use this tool. Propagates to the caller, never becomes model prose."""


class ToolExecutionError(DomainError):
    """A tool failed in a way the model should hear about (a failure result, not a raise)."""

    code = "TOOL_EXECUTION_FAILED"
    retryable = True
