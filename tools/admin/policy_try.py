"""Try a call (admin, `/admin/policies/try/`): a tenant administrator names a tool of their
tenant's catalog, its arguments (JSON) and a requester of their tenant, and reads what the
pipeline would decide now (tools.trial.try_call, which writes nothing).

Platform operators may try a call for any tenant's member; a tenant administrator only for a
member of their own tenant. The page's URLs are added to the admin site here
(`policy_admin_urls`), with the shadow report's (tools.admin.policy_shadow), and both are listed
under "Policies" on the admin index (`policy_admin_entries`).
"""
from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import Q
from django.http import Http404, HttpRequest
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.translation import gettext_lazy as _

from agentplatform.tenancy.admin_scope import tenant_users
from agentplatform.tenancy.models import User
from agentplatform.tenancy.roles import PLATFORM_OPERATOR, TENANT_ADMINISTRATOR, admin_role
from policies.selectors import bundle_in_force
from tools.models import Tool
from tools.registry import registry
from tools.trial import TryInvalid, try_call



def _scope(request: HttpRequest) -> tuple[str, int | None]:
    """(role, tenant id or None for an operator); Http404 for anyone else."""
    role = admin_role(request.user)
    if role == PLATFORM_OPERATOR:
        return role, None
    if role == TENANT_ADMINISTRATOR:
        return role, request.user.tenant_id
    raise Http404("no access")


def requesters_for(tenant_id: int | None):
    """The users a viewer may try a call for: members of their tenant (any tenant's for an operator)."""
    users = User.objects.filter(tenant__isnull=False, is_active=True) if tenant_id is None else tenant_users(tenant_id)
    return users.select_related("tenant").order_by("username")


def tools_for(tenant_id: int | None) -> list[Tool]:
    """The registered tools a viewer may try, by name: shared tools and their tenant's own remote
    tools (every tool for an operator)."""
    tools = Tool.objects.all() if tenant_id is None else Tool.objects.filter(
        Q(tenant__isnull=True) | Q(tenant_id=tenant_id))
    return [row for row in tools.order_by("name") if registry.get(row.name) is not None]


class TryForm(forms.Form):
    """A tool name, a requester's username and the arguments (a JSON object)."""

    tool = forms.CharField(max_length=100, label="Tool / 工具")
    requester = forms.CharField(max_length=150, label="Requester / 申请人")
    arguments = forms.CharField(widget=forms.Textarea(attrs={"rows": 6, "cols": 60, "spellcheck": "false"}),
                                label="Arguments (JSON) / 参数（JSON）", initial="{}", strip=False)

    def __init__(self, *args, tenant_id: int | None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.tenant_id = tenant_id

    def clean_requester(self) -> Any:
        username = self.cleaned_data["requester"].strip()
        user = requesters_for(self.tenant_id).filter(username=username).first()
        if user is None:  # another tenant's member is not named: nothing tells the two apart
            raise forms.ValidationError(f"no member {username[:150]!r} in your tenant / 您的租户中没有该用户")
        return user

    def clean_tool(self) -> str:
        name = self.cleaned_data["tool"].strip()
        if name not in {row.name for row in tools_for(self.tenant_id)}:
            raise forms.ValidationError(f"unknown tool {name[:100]!r}: not in your tenant's catalog / "
                                        "未知工具：不在您租户的工具目录中")
        return name

    def clean_arguments(self) -> str:
        text = self.cleaned_data["arguments"]
        try:
            json.loads(text)
        except ValueError as exc:
            raise forms.ValidationError(f"not valid JSON: {exc} / 不是有效的 JSON") from None
        return text

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        user, tool = data.get("requester"), data.get("tool")
        if user is not None and tool and not Tool.objects.filter(
                Q(tenant__isnull=True) | Q(tenant_id=user.tenant_id), name=tool).exists():
            self.add_error("tool", f"unknown tool {tool!r} in the requester's tenant / 申请人所在租户没有该工具")
        return data


def try_view(request: HttpRequest) -> TemplateResponse:
    """GET: the form (a tool and a requester may be preset with ?tool=&requester=). POST: the form
    with the verdict of the tried call, or its errors. Nothing is written either way."""
    role, tenant_id = _scope(request)
    source = request.POST if request.method == "POST" else None
    form = TryForm(source, tenant_id=tenant_id, initial={k: request.GET[k] for k in ("tool", "requester")
                                                         if k in request.GET})
    tried, errors = None, []
    if source is not None and form.is_valid():
        try:
            tried = try_call(requester=form.cleaned_data["requester"], tool_name=form.cleaned_data["tool"],
                             arguments=form.cleaned_data["arguments"])
        except TryInvalid as exc:
            form.add_error(exc.field, exc.message)
            errors = exc.errors
    context = {**admin.site.each_context(request), "title": _("Try a call"), "form": form, "tried": tried,
               "argument_errors": errors, "requesters": requesters_for(tenant_id), "tools": tools_for(tenant_id),
               "operator": role == PLATFORM_OPERATOR,
               "bundle": bundle_in_force(tried.requester.tenant_id) if tried else None}
    request.current_app = admin.site.name
    return TemplateResponse(request, "admin/policies/try_call.html", context)


# -- wiring into the admin site -------------------------------------------------------------------


def policy_admin_urls() -> list:
    """The URLs of the policy pages of the admin site (try a call, the shadow report)."""
    from tools.admin.policy_shadow import shadow_calls_view, shadow_report_view

    wrap = admin.site.admin_view
    return [path("policies/try/", wrap(try_view), name="policies_try"),
            path("policies/shadow/", wrap(shadow_report_view), name="policies_shadow"),
            path("policies/shadow/calls/", wrap(shadow_calls_view), name="policies_shadow_calls")]


def policy_admin_entries(request: HttpRequest, app_list: list[dict]) -> list[dict]:
    """`app_list` (AdminSite.get_app_list) with "Try a call" and "Shadow report" listed under the
    Policies app for operators and tenant administrators (the app is added when no model of it is)."""
    if admin_role(request.user) not in (PLATFORM_OPERATOR, TENANT_ADMINISTRATOR):
        return app_list
    entries = [{"name": _("Try a call"), "object_name": "PolicyTry", "admin_url": reverse("admin:policies_try"),
                "add_url": None, "view_only": True, "perms": {"view": True}},
               {"name": _("Shadow report"), "object_name": "PolicyShadowReport",
                "admin_url": reverse("admin:policies_shadow"), "add_url": None, "view_only": True,
                "perms": {"view": True}}]
    app = next((a for a in app_list if a.get("app_label") == "policies"), None)
    if app is None:
        app = {"name": _("Policies"), "app_label": "policies", "app_url": entries[0]["admin_url"],
               "has_module_perms": True, "models": []}
        app_list = sorted([*app_list, app], key=lambda a: a["name"].lower())
    app["models"] = [*app["models"], *(e for e in entries if e["object_name"] not in
                                       {m.get("object_name") for m in app["models"]})]
    return app_list


def _install(site: admin.AdminSite) -> None:
    """Add the policy pages' URLs and index entries to `site` (once)."""
    if getattr(site, "_policy_pages", False):
        return
    site._policy_pages = True
    get_urls, get_app_list = site.get_urls, site.get_app_list

    def urls() -> list:
        return policy_admin_urls() + get_urls()

    def app_list(request: HttpRequest, app_label: str | None = None) -> list[dict]:
        listed = get_app_list(request, app_label)
        if app_label not in (None, "policies"):
            return listed
        return policy_admin_entries(request, listed)

    site.get_urls, site.get_app_list = urls, app_list


_install(admin.site)
