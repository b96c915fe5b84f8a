"""Domain errors shared by every app, each with a stable code (clients branch on it) and an HTTP status.

Lower apps raise these; the API's exception handler turns them into the one error body
`{"code", "message", "retryable"}`.
"""
from __future__ import annotations


class DomainError(Exception):
    """Base of every error a user or program may see. `code` is stable; `message` is for humans."""

    code = "ERROR"
    http_status = 400
    retryable = False

    def __init__(self, message: str = "", *, code: str | None = None) -> None:
        super().__init__(message or self.code)
        self.message = message or self.code
        if code:
            self.code = code


class NotFoundError(DomainError):
    """Unknown id, or an object of another tenant (answered as 404, never 403)."""

    code = "NOT_FOUND"
    http_status = 404


class PermissionDeniedError(DomainError):
    """The server-side identity lacks a permission. Propagates to the caller: a missing permission is never retried or
    turned into a softer answer."""

    code = "PERMISSION_DENIED"
    http_status = 403


class InvalidInputError(DomainError):
    """Malformed request input."""

    code = "INVALID_ARGUMENTS"
    http_status = 400


class ConflictError(DomainError):
    """The object is in a state that does not allow this action."""

    code = "CONFLICT"
    http_status = 409


# Run error codes that are worth retrying later (a provider outage or timeout): a chat request
# whose run FAILED with one of them does not keep its Idempotency-Key (docs/decisions.md, item 13).
RETRYABLE_RUN_ERRORS = frozenset({"MODEL_UNAVAILABLE", "MODEL_TIMEOUT", "MODEL_RATE_LIMITED"})


class ModelQuotaExceeded(DomainError):
    """The tenant used its model calls of the day (TENANT_MODEL_CALLS_PER_DAY, or the tenant's own
    quota set in the admin); HTTP 429 with Retry-After = seconds until 00:00 UTC."""

    code = "MODEL_QUOTA_EXCEEDED"
    http_status = 429
    retryable = True

    def __init__(self, message: str = "", *, retry_after: int = 0) -> None:
        super().__init__(message)
        self.retry_after = retry_after
