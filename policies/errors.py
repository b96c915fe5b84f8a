"""Errors of policy bundles, with stable codes (core.errors)."""
from __future__ import annotations

from core.errors import InvalidInputError


class BundleInvalid(InvalidInputError):
    """A policy bundle that cannot be applied: not YAML, too large, a Cedar syntax error, a policy
    that does not validate against the schema generated from the tool catalog, a limit naming an
    unknown tool or argument. `errors` lists every problem found: [{"where": "policy
    refunds-over-500-need-two" | "limits[0].per" | "file", "message": str}]. HTTP 400, code
    POLICY_BUNDLE_INVALID. The version in force is left as it was."""

    code = "POLICY_BUNDLE_INVALID"

    def __init__(self, errors: list[dict[str, str]]) -> None:
        self.errors = errors
        first = errors[0] if errors else {"where": "file", "message": "invalid"}
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        super().__init__(f"{first['where']}: {first['message']}{more}")
