"""The shadow report (admin, `/admin/policies/shadow/`): per shadow rule or limit, what it would
have done over a period ("would have required approval for 37 calls, denied 2"), each count
linking to the calls (`/admin/policies/shadow/calls/`: the verdicts, each linking to the call's
rows in the audit trail). Read from policies.shadow (shadow_report, shadow_verdicts). A tenant
administrator sees their tenant's verdicts; a platform operator every tenant's.

The URLs are added to the admin site by tools.admin.policy_try.policy_admin_urls.
"""
from __future__ import annotations

import datetime
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import admin
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from core.text import is_row_id
from core import clock
from agentplatform.tenancy.models import Tenant
from agentplatform.tenancy.roles import PLATFORM_OPERATOR, TENANT_ADMINISTRATOR, admin_role
from policies.shadow import shadow_report, shadow_verdicts

DEFAULT_DAYS = 7
# How each verdict reads in the report's sentence, in the report's order.
WOULD_WORDS = {
    "APPROVAL": ("would have required approval for", "将需要审批"),
    "CONFIRM": ("would have required the requester's confirmation for", "将需要申请人确认"),
    "DENY": ("would have denied", "将拒绝"),
}


class PeriodForm(forms.Form):
    """From / to dates (UTC, both included); the last DEFAULT_DAYS days when left empty."""

    start = forms.DateField(required=False, label="From / 从", widget=forms.DateInput(attrs={"type": "date"}))
    end = forms.DateField(required=False, label="To / 到", widget=forms.DateInput(attrs={"type": "date"}))

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("start") and data.get("end") and data["start"] > data["end"]:
            raise forms.ValidationError("'from' is after 'to' / 开始日期晚于结束日期")
        return data


def period(form: PeriodForm) -> tuple[datetime.datetime, datetime.datetime]:
    """[since, until) of a valid (or unbound) PeriodForm: from the start of 'from' to the end of
    'to' (UTC); the last DEFAULT_DAYS days by default."""
    now = clock.now()
    data = form.cleaned_data if form.is_bound and form.is_valid() else {}
    utc = datetime.timezone.utc
    until = (datetime.datetime.combine(data["end"] + datetime.timedelta(days=1), datetime.time(), utc)
             if data.get("end") else now)
    since = (datetime.datetime.combine(data["start"], datetime.time(), utc) if data.get("start")
             else until - datetime.timedelta(days=DEFAULT_DAYS))
    return since, until


def _scope(request: HttpRequest) -> int | None:
    """The tenant whose verdicts the viewer reads (None: every tenant, for an operator); 404 otherwise."""
    role = admin_role(request.user)
    if role == PLATFORM_OPERATOR:
        return None
    if role == TENANT_ADMINISTRATOR:
        return request.user.tenant_id
    raise Http404("no access")


def _period_query(request: HttpRequest) -> dict[str, str]:
    return {k: request.GET[k] for k in ("start", "end") if request.GET.get(k)}


def sentence(counts: dict[str, int]) -> str:
    """'would have required approval for 37 calls, would have denied 2 calls' (English / Chinese)."""
    parts, zh = [], []
    for would, (words, chinese) in WOULD_WORDS.items():
        n = counts.get(would, 0)
        if n:
            parts.append(f"{words} {n} call{'s' if n != 1 else ''}")
            zh.append(f"{chinese} {n} 次")
    return f"{', '.join(parts)} / {'，'.join(zh)}" if parts else "—"


def shadow_report_view(request: HttpRequest) -> TemplateResponse:
    """Per shadow rule of the viewer's scope, its verdict counts in the chosen period, each count
    linking to the calls."""
    tenant_id = _scope(request)
    form = PeriodForm(request.GET or None)
    since, until = period(form)
    rows = shadow_report(tenant_id=tenant_id, since=since, until=until)
    tenants = dict(Tenant.objects.filter(pk__in={r["tenant_id"] for r in rows}).values_list("pk", "slug"))
    query = _period_query(request)
    calls_url = reverse("admin:policies_shadow_calls")
    for row in rows:
        row["tenant"] = tenants.get(row["tenant_id"], row["tenant_id"])
        row["sentence"] = sentence(row["counts"])
        row["sentence_zh"] = row["sentence"].split(" / ", 1)[-1]
        row["links"] = [{"would": would, "label": WOULD_WORDS[would][0], "count": row["counts"][would],
                         "url": f"{calls_url}?" + urlencode({**query, "rule": row["rule_id"], "would": would,
                                                             **({"tenant": row["tenant_id"]} if tenant_id is None
                                                                else {})})}
                        for would in WOULD_WORDS if row["counts"].get(would)]
    context = {**admin.site.each_context(request), "title": _("Shadow report"), "form": form,
               "rows": rows, "since": since, "until": until, "operator": tenant_id is None}
    request.current_app = admin.site.name
    return TemplateResponse(request, "admin/policies/shadow_report.html", context)


def shadow_calls_view(request: HttpRequest) -> TemplateResponse:
    """The verdicts behind one count (?rule=&would=&start=&end=, and &tenant= for an operator),
    100 a page, each with a link to the call's rows in the audit trail."""
    tenant_id = _scope(request)
    if tenant_id is None and is_row_id(request.GET.get("tenant", "")):
        tenant_id = int(request.GET["tenant"])
    would = request.GET.get("would") or None
    if would is not None and would not in WOULD_WORDS:
        raise Http404("unknown verdict")
    form = PeriodForm(request.GET or None)
    since, until = period(form)
    rows = shadow_verdicts(tenant_id=tenant_id, since=since, until=until, rule_id=request.GET.get("rule") or None,
                           would=would)
    page = Paginator(rows, 100).get_page(request.GET.get("page"))
    audit_url = reverse("admin:audit_auditevent_changelist")
    for verdict in page.object_list:
        filters = {"tool_call_id": verdict.tool_call_id}
        if verdict.conversation_id:
            filters["conversation_id"] = str(verdict.conversation_id)
        verdict.audit_url = f"{audit_url}?{urlencode(filters)}"
    context = {**admin.site.each_context(request), "title": _("Shadow verdicts"),
               "page": page, "rule": request.GET.get("rule", ""), "would": would,
               "would_label": WOULD_WORDS[would][0] if would else "", "since": since, "until": until,
               "report_url": f"{reverse('admin:policies_shadow')}?{urlencode(_period_query(request))}",
               "query": urlencode({k: v for k, v in request.GET.items() if k != "page"})}
    request.current_app = admin.site.name
    return TemplateResponse(request, "admin/policies/shadow_calls.html", context)
