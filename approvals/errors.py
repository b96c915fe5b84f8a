"""Errors of the confirmation and approval services, with stable codes and HTTP statuses."""
from dataclasses import dataclass

from core.errors import ConflictError, DomainError, NotFoundError, PermissionDeniedError


class ConfirmationNotFound(NotFoundError):
    """A person named a request or token they cannot decide: unknown, or another tenant's or
    user's (HTTP 404)."""

    code = "CONFIRMATION_INVALID"


class ConfirmationNotConsumable(NotFoundError):
    """At consume time no CONFIRMED request matches exactly this call: a binding that differs
    (another tenant, user, conversation, tool or arguments), a replay, or a request that is not
    CONFIRMED. Raised inside the executing transaction; the same code as an unknown request, so a
    probe learns nothing from it."""

    code = "CONFIRMATION_INVALID"


class ConfirmationExpired(DomainError):
    """The request expired before the decision (HTTP 410)."""

    code = "CONFIRMATION_EXPIRED"
    http_status = 410


class ConfirmationAlreadyDecided(ConflictError):
    """A second decision on a decided request, or a replayed token (HTTP 409)."""

    code = "ALREADY_DECIDED"


class ApprovalForbidden(PermissionDeniedError):
    """Own request, no `approve_tool`, or a decision of the wrong kind for this request."""

    code = "APPROVAL_FORBIDDEN"


class ApproverNotIndependent(PermissionDeniedError):
    """The approver holds approve_tool but their decision would not count toward this request's
    quorum: their standing came from the requester, began after the request was created, or they
    are a service account (approvals.independence; docs/approvals.md, "Eligibility")."""

    code = "APPROVER_NOT_INDEPENDENT"


class ReasonRequired(DomainError):
    """A rejection needs a non-blank reason."""

    code = "INVALID_ARGUMENTS"


class ConsumeRefused(DomainError):
    """The decision no longer holds at consume time and the call must not run (nothing ran).

    Raised inside the consuming transaction (which rolls back); the caller records it afterwards
    with `confirmation_refuse`. `code`: POLICY_DENIED, TOOL_DISABLED, PERMISSION_DENIED, a
    precheck's business code, or IDEMPOTENCY_CONFLICT.
    """

    code = "CONSUME_REFUSED"


@dataclass(frozen=True)
class Regate:
    """What a request needs now that the policy in force became stricter than what it carries.

    Raised as `ConfirmationRegated` inside the consuming transaction; the caller applies it after
    the rollback with `confirmation_regate`. policy: "APPROVERS". quorum: approvals needed now.
    reason / reason_zh: why, in English / Chinese words for the requester and the audit trail
    (approvals.presentation.regate_reason). cause: one of CAUSES. counted: the approvals that
    still count toward `quorum`.
    """

    # The requester's confirmation no longer suffices (risk or policy raised); more approvals are
    # needed than were given (quorum raised); approvals stopped counting (an approver lost standing).
    CAUSES = ("APPROVERS_NOW", "QUORUM_RAISED", "APPROVALS_LAPSED")

    policy: str
    quorum: int
    risk: str
    ttl_seconds: int
    reason: str
    reason_zh: str = ""
    cause: str = "APPROVERS_NOW"
    counted: int = 0
    policy_version: int | None = None  # the policy bundle version in force at the regate
    policy_rules: tuple[str, ...] = ()  # the bundle rules that require more now (docs/policy.md)

    def told(self) -> str:
        """What the requester and the trail are told: "English / 中文" (one text, both languages)."""
        return f"{self.reason} / {self.reason_zh}" if self.reason_zh else self.reason

    def notice(self, *, tool: str) -> dict:
        """The client-facing account of this regate (run events, chat responses): {"cause", "tool",
        "quorum", "approvals", "message", "message_zh"}."""
        return {"cause": self.cause, "tool": tool, "quorum": self.quorum, "approvals": self.counted,
                "message": self.reason, "message_zh": self.reason_zh}


class ConfirmationRegated(DomainError):
    """The policy in force at consume time is stricter than the decision carried: wait again."""

    code = "CONFIRMATION_REGATED"

    def __init__(self, regate: Regate) -> None:
        super().__init__(regate.reason)
        self.regate = regate


class EditInvalid(DomainError):
    """Edited arguments that the tool's schema, business rules, money normalisation or precheck
    refuse (HTTP 400, INVALID_ARGUMENTS). `errors`: [{"field", "error", "code"?}] for the client.
    Nothing is changed."""

    code = "INVALID_ARGUMENTS"

    def __init__(self, message: str, *, errors: list[dict] | None = None, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.errors = errors or []


class EditNotAllowed(EditInvalid):
    """An edit that goes beyond what the requester asked for (HTTP 400, EDIT_NOT_ALLOWED): it changes
    an argument the tool does not let approvers edit, or moves one in a direction its rule forbids
    (an amount above the requester's). `errors`: [{"field", "error", "code"}], code NOT_EDITABLE or
    ABOVE_REQUESTED. Nothing is changed; the approver rejects with a reason instead and the
    requester may ask again (docs/approvals.md, "Edits stay within the request")."""

    code = "EDIT_NOT_ALLOWED"


class EditUnchanged(DomainError):
    """The edited arguments bind the same call as the current ones once normalised ("50" and
    "50.00" are one amount): nothing to edit (HTTP 400)."""

    code = "EDIT_UNCHANGED"


class ArgumentsChanged(ConflictError):
    """The edit was made on arguments that are no longer the request's (another approver edited
    first): `base_arguments_hash` is stale. Nothing is changed; read the request again (HTTP 409)."""

    code = "ARGUMENTS_CHANGED"
