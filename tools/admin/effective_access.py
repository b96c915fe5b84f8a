"""The effective-access page of ToolAdmin: for one member, each tool with every condition of access
(tools.access) held or missing, and a Grant button for what a tenant administrator can give
(tools.access_grants: the tenant's whitelist entry, use_tool, the tool's permission)."""
from __future__ import annotations

from django.contrib import messages
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.translation import gettext as _

from core.text import is_row_id
from agentplatform.tenancy.admin_scope import tenant_users
from agentplatform.tenancy.models import User
from agentplatform.tenancy.roles import TENANT_ADMINISTRATOR
from core.errors import DomainError
from tools.access import tool_access, tools_access
from tools.access_grants import GRANTABLE, access_grant
from tools.display import tool_label


class EffectiveAccessMixin:
    """Adds `/admin/tools/tool/effective-access/?user=<id>[&tool=<id>]` (URL name
    `admin:tools_tool_effective_access`) to ToolAdmin; a POST of `grant=<tool id>` (repeatable)
    grants what is missing. Mixed into a TenantScopedAdminMixin admin (uses `self.role`)."""

    def get_urls(self):
        urls = super().get_urls()
        view = self.admin_site.admin_view(self.effective_access_view)
        return [path("effective-access/", view, name="tools_tool_effective_access")] + urls

    def _members(self, request: HttpRequest):
        users = User.objects.filter(tenant__isnull=False)
        if self.role(request) == TENANT_ADMINISTRATOR:
            users = tenant_users(request.user.tenant_id)
        return users.order_by("username")

    def effective_access_view(self, request: HttpRequest) -> HttpResponse:
        """Operators pick any member of a tenant; a tenant administrator only their tenant's
        members (another tenant's user, or a superuser, answers 404)."""
        if self.role(request) is None:
            raise Http404("no access")
        users = self._members(request)
        params = request.POST if request.method == "POST" else request.GET
        chosen = tool = None
        if params.get("user"):
            chosen = get_object_or_404(users, pk=params["user"]) if is_row_id(params["user"]) else None
            if chosen is None:
                raise Http404("no such user")
        # The tools this viewer may see (another tenant's MCP tools are not among them), and of
        # those, for a chosen user, the ones their tenant can see at all.
        tools = self.get_queryset(request)
        if chosen is not None:
            tools = tools.filter(Q(tenant__isnull=True) | Q(tenant_id=chosen.tenant_id))
        if params.get("tool"):
            tool = get_object_or_404(tools, pk=params["tool"]) if is_row_id(params["tool"]) else None
            if tool is None:
                raise Http404("no such tool")
        if request.method == "POST" and chosen is not None:
            return self._grant(request, chosen, tool, params.getlist("grant"))
        rows = []
        if chosen is not None:
            rows = [tool_access(user=chosen, tool=tool)] if tool is not None else tools_access(user=chosen)
        ids = dict(tools.values_list("name", "pk"))
        shown = [{"access": row, "label": tool_label(row.tool), "pk": ids.get(row.tool),
                  "grantable": [c for c in row.missing if c.key in GRANTABLE]} for row in rows]
        context = {**self.admin_site.each_context(request), "opts": self.model._meta,
                   "title": _("Effective access"), "users": users,
                   "tools": [(t.pk, tool_label(t.name)) for t in tools.order_by("name")],
                   "chosen": chosen, "tool": tool, "rows": rows, "shown": shown,
                   "any_grantable": any(r["grantable"] for r in shown),
                   "keys": [("member", _("member")), ("platform", _("platform")), ("tenant", _("tenant")),
                            ("use_tool", "use_tool"), ("permission", _("permission"))]}
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/tools/tool/effective_access.html", context)

    def _grant(self, request: HttpRequest, chosen: User, tool, grant: list[str]) -> HttpResponse:
        """POST: grant what `chosen` lacks to use each tool of `grant` (tool ids), then back to the
        page with a message per tool (granted, and what was refused and why)."""
        ids = sorted({int(g) for g in grant if is_row_id(g)})
        if not ids or not set(ids) <= set(self.get_queryset(request).values_list("pk", flat=True)):
            raise Http404("no such tool")
        try:
            results = access_grant(actor=request.user, user=chosen, tool_ids=ids)
        except DomainError as error:
            self.message_user(request, f"{error.message} [{error.code}]", messages.ERROR)
            results = []
        for result in results:
            if result.granted:
                self.message_user(request, _("%(tool)s: granted to %(user)s.") % {
                    "tool": result.tool, "user": chosen.username}, messages.SUCCESS)
            for reason in result.reasons.values():
                self.message_user(request, f"{result.tool}: {reason}", messages.WARNING)
        url = reverse("admin:tools_tool_effective_access") + f"?user={chosen.pk}"
        return HttpResponseRedirect(url + (f"&tool={tool.pk}" if tool is not None else ""))
