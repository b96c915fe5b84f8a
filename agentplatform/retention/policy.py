"""Which retention applies to a tenant, and which settings a role may choose
(docs/operations.md, "Retention and storage").

Rules: a value is a number of days (0 keeps forever). The audit trail never goes below
RETENTION_AUDIT_MIN_DAYS, whoever asks (the floor is the operator's, set in the environment): a
tenant administrator cannot quietly shorten the evidence of their own acts. A tenant administrator
may shorten any class down to that floor (1 day for the others) but not keep anything longer than
the platform default (storage is the operator's cost); a platform operator may choose any value
at or above the floor, or 0.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from django.conf import settings

from core.errors import DomainError

FIELDS = ("run_event_days", "conversation_days", "request_days", "audit_days")


@dataclass(frozen=True)
class RetentionDays:
    """Days online per class (0: forever): run events, conversations with their messages and
    runs, decided confirmation requests with their approvals, audit rows."""

    run_event_days: int
    conversation_days: int
    request_days: int
    audit_days: int

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class RetentionSettingRefused(DomainError):
    """A retention setting outside what the role may choose (code RETENTION_SETTING_REFUSED)."""

    code = "RETENTION_SETTING_REFUSED"
    http_status = 400


def defaults() -> RetentionDays:
    """The platform's defaults (RETENTION_*_DAYS), the audit one raised to the floor."""
    audit = settings.RETENTION_AUDIT_DAYS
    return RetentionDays(settings.RETENTION_RUN_EVENT_DAYS, settings.RETENTION_CONVERSATION_DAYS,
                         settings.RETENTION_REQUEST_DAYS, audit if audit == 0 else max(audit, floor("audit_days")))


def floor(field: str) -> int:
    """The least number of days `field` may be set to (0 aside)."""
    return settings.RETENTION_AUDIT_MIN_DAYS if field == "audit_days" else 1


def days_for(override=None) -> RetentionDays:
    """The retention in force for a tenant whose TenantRetention row is `override` (None: none):
    its non-empty fields over the defaults. A stored audit value below today's floor (the floor was
    raised since) counts as the floor."""
    base = defaults().as_dict()
    for field in FIELDS:
        value = getattr(override, field, None) if override is not None else None
        if value is not None:
            base[field] = value if value == 0 or field != "audit_days" else max(value, floor(field))
    return RetentionDays(**base)


def setting_errors(values: dict[str, int | None], *, platform_operator: bool) -> dict[str, str]:
    """field -> why the value is refused, for the values a role asks to set (empty: all allowed).
    values: field -> days or None (the default)."""
    errors: dict[str, str] = {}
    base = defaults().as_dict()
    for field in FIELDS:
        value = values.get(field)
        if value is None:
            continue
        if value == 0:
            if not platform_operator:
                errors[field] = "Only a platform operator may keep records forever (0)."
            continue
        if value < floor(field):
            errors[field] = f"At least {floor(field)} days (RETENTION_AUDIT_MIN_DAYS)." if field == "audit_days" \
                else "At least 1 day."
        elif not platform_operator and base[field] and value > base[field]:
            errors[field] = f"At most the platform default, {base[field]} days: only a platform operator keeps longer."
    return errors


def check_setting(values: dict[str, int | None], *, platform_operator: bool) -> None:
    """Raise RetentionSettingRefused naming each refused field (see setting_errors)."""
    errors = setting_errors(values, platform_operator=platform_operator)
    if errors:
        raise RetentionSettingRefused("; ".join(f"{k}: {v}" for k, v in errors.items()))
