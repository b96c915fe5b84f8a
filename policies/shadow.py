"""Shadow verdicts: what a shadow rule or limit would have done to a call, recorded and counted,
never enforced (docs/policy.md, "Shadow mode"). The admin's shadow report reads them back."""
from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterable

from django.db.models import Count
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


def shadow_summary(*, tenant_id: int, since: datetime.datetime, until: datetime.datetime) -> list[dict]:
    """Per shadow rule, what it would have done between `since` and `until`: [{"rule_id",
    "would", "calls"}], ordered by rule id then verdict."""
    return list(ShadowVerdict.objects.filter(tenant_id=tenant_id, occurred_at__gte=since, occurred_at__lt=until)
                .values("rule_id", "would").annotate(calls=Count("id")).order_by("rule_id", "would"))
