"""The approval quality overview (`approvals:overview`, /approvals/overview/): how long approvers
take, who decides without reading, what expires unseen, and requests over time, for tenant
administrators and auditors (approvals.overview_access). Read-only; numbers from
approvals.quality and approvals.quality_series, charts from approvals.charts (server-rendered SVG).

Query string: `days` (7, 30 or 90; anything else reads as 30), `tenant` (a tenant's slug; only a
platform operator may name another tenant than their own).
"""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from agentplatform.tenancy.models import Tenant
from agentplatform.tenancy.roles import is_platform_operator
from approvals import quality, quality_series, quality_window
from approvals.charts import bar_chart
from approvals.overview_access import overview_tenant

CHART_TITLES = {  # series -> (English, Chinese)
    "waiting": ("Waiting at the end of each day", "每日结束时待审批"),
    "approved": ("Approved per day", "每日批准"),
    "rejected": ("Rejected per day", "每日拒绝"),
    "expired": ("Expired per day", "每日过期"),
}


def duration_text(seconds: float | None) -> str:
    """A duration for people: "—" (none), "8 s", "3 min 20 s", "2 h 5 min", "1 d 3 h"."""
    if seconds is None:
        return "—"
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s" if s % 60 else f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def _percent(part: int, whole: int) -> str:
    return f"{round(100 * part / whole)}%" if whole else "—"


def _row(stats: quality.DecisionStats, *, name: str) -> dict:
    """One table row: counts, rates as text, durations as text."""
    n = stats.decisions
    return {"name": name, "key": stats.key, "decisions": n,
            "approve": _percent(stats.approve, n), "reject": _percent(stats.reject, n),
            "edit": _percent(stats.edit, n), "respond": _percent(stats.respond, n),
            "median": duration_text(stats.median_seconds), "p90": duration_text(stats.p90_seconds),
            "unviewed": stats.unviewed, "unviewed_rate": _percent(stats.unviewed, n),
            "fast": stats.fast, "fast_rate": _percent(stats.fast, n),
            "hasty_share": stats.rate(stats.hasty)}


def _approver_rows(stats: list[quality.DecisionStats]) -> list[dict]:
    users = {u.pk: u for u in get_user_model().objects.filter(pk__in=[s.key for s in stats])}
    rows = []
    for s in stats:
        user = users.get(s.key)
        rows.append(_row(s, name=(user.get_full_name() or user.get_username()) if user else "—"))
    return rows


def _tool_rows(stats: list[quality.DecisionStats], tenant_id: int, window: quality_window.Window) -> list[dict]:
    """Per tool: decision quality and, from the expiry counts, what expired and what expired unseen."""
    expired = {row["tool_name"]: row for row in quality.expired_unseen(tenant_id=tenant_id, window=window)}
    rows = []
    for s in stats:
        rows.append({**_row(s, name=str(s.key)), **_expiry(expired.pop(str(s.key), None))})
    for name, row in sorted(expired.items()):  # tools whose requests only expired
        empty = quality.DecisionStats(key=name, decisions=0, approve=0, reject=0, edit=0, respond=0, unviewed=0,
                                      fast=0, median_seconds=None, p90_seconds=None)
        rows.append({**_row(empty, name=name), **_expiry(row)})
    return rows


def _expiry(row: dict | None) -> dict:
    return {"expired": row["expired"] if row else 0, "expired_unseen": row["unseen"] if row else 0}


@login_required
@require_GET
def overview(request: HttpRequest) -> HttpResponse:
    """The overview page of one tenant. 403 for people who are neither administrators nor
    auditors; 404 for another tenant's slug (an operator: for an unknown one)."""
    tenant = overview_tenant(request.user, request.GET.get("tenant"))
    try:
        days = int(request.GET.get("days", quality_window.DEFAULT_DAYS))
    except ValueError:
        days = quality_window.DEFAULT_DAYS
    if days not in quality_window.CHOICES:
        days = quality_window.DEFAULT_DAYS
    window = quality_window.window_last_days(days)
    tables = quality.quality_tables(tenant_id=tenant.pk, window=window)
    totals = tables["all"]
    series = quality_series.daily_counts(tenant_id=tenant.pk, window=window)
    charts = [bar_chart(key=key, title=f"{en} / {zh}", level=key == "waiting",
                        points=[(d.day, getattr(d, key)) for d in series])
              for key, (en, zh) in CHART_TITLES.items()]
    tool_rows = _tool_rows(tables["tool"], tenant.pk, window)
    return render(request, "approvals/overview.html", {
        "tenant": tenant, "days": days, "day_choices": quality_window.CHOICES, "window": window,
        "tenants": list(Tenant.objects.order_by("slug")) if is_platform_operator(request.user) else [],
        "totals": _row(totals[0], name="all") if totals else None,
        "approver_rows": _approver_rows(tables["approver"]), "tool_rows": tool_rows,
        "expired_total": sum(r["expired"] for r in tool_rows),
        "expired_unseen_total": sum(r["expired_unseen"] for r in tool_rows),
        "charts": charts, "series": series, "fast_seconds": int(quality.fast_decision_seconds()),
    })
