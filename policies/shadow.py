"""Shadow verdicts: what a shadow rule or limit would have done to a call, recorded and counted,
never enforced (docs/policy.md, "Shadow mode"). The admin's shadow report reads them back."""
from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterable

from django.db.models import Count, QuerySet
from prometheus_client import Counter

from policies.engine import Shadowed
from policies.models import ShadowVerdict

# Label values are a bundle's rule ids (at most MAX_POLICIES + limits per bundle) and `would`.
SHADOW_VERDICTS = Counter("agentplatform_policy_shadow_verdicts",
                          "Verdicts of shadow policy rules and limits (recorded, not enforced)",
                          ["rule", "would"])


def shadow_record(*, tenant_id: int, version: int, verdicts: Iterable[Shadowed], tool_name: str,
                  user_id: int | None, tool_call_id: str, conversation_id: uuid.UUID | str | None) -> int:
    """Store and count each shadow verdict of one call (in the caller's transaction). Returns how
    many were recorded."""
    rows = [ShadowVerdict(tenant_id=tenant_id, bundle_version=version, rule_id=v.rule_id[:100], would=v.would,
                          quorum=v.quorum, tool_name=tool_name[:100], user_id=user_id,
                          tool_call_id=tool_call_id[:128], conversation_id=conversation_id) for v in verdicts]
    if rows:
        ShadowVerdict.objects.bulk_create(rows)
        for row in rows:
            SHADOW_VERDICTS.labels(rule=row.rule_id, would=row.would).inc()
    return len(rows)


def shadow_summary(*, tenant_id: int | None, since: datetime.datetime, until: datetime.datetime) -> list[dict]:
    """Per shadow rule, what it would have done between `since` (included) and `until` (excluded):
    [{"tenant_id", "rule_id", "would", "calls"}], ordered by tenant, rule id, then verdict.
    tenant_id: one tenant's verdicts, or None for every tenant's (platform operators)."""
    rows = ShadowVerdict.objects.filter(occurred_at__gte=since, occurred_at__lt=until)
    if tenant_id is not None:
        rows = rows.filter(tenant_id=tenant_id)
    return list(rows.values("tenant_id", "rule_id", "would").annotate(calls=Count("id"))
                .order_by("tenant_id", "rule_id", "would"))


def shadow_report(*, tenant_id: int | None, since: datetime.datetime, until: datetime.datetime) -> list[dict]:
    """shadow_summary folded per rule: [{"tenant_id", "rule_id", "counts": {would: calls},
    "total"}], one entry per (tenant, rule) with at least one verdict in the period, in
    shadow_summary's order."""
    report: dict[tuple[int, str], dict] = {}
    for row in shadow_summary(tenant_id=tenant_id, since=since, until=until):
        entry = report.setdefault((row["tenant_id"], row["rule_id"]), {
            "tenant_id": row["tenant_id"], "rule_id": row["rule_id"], "counts": {}, "total": 0})
        entry["counts"][row["would"]] = row["calls"]
        entry["total"] += row["calls"]
    return list(report.values())


def shadow_verdicts(*, tenant_id: int | None, since: datetime.datetime, until: datetime.datetime,
                    rule_id: str | None = None, would: str | None = None) -> QuerySet[ShadowVerdict]:
    """The shadow verdicts behind a count of the report (newest first): of one tenant (None: all),
    in [since, until), optionally of one rule and one verdict (DENY, APPROVAL, CONFIRM)."""
    rows = ShadowVerdict.objects.filter(occurred_at__gte=since, occurred_at__lt=until)
    if tenant_id is not None:
        rows = rows.filter(tenant_id=tenant_id)
    if rule_id:
        rows = rows.filter(rule_id=rule_id)
    if would:
        rows = rows.filter(would=would)
    return rows.select_related("user", "tenant").order_by("-occurred_at", "-id")
