"""The users' admin with roles: a "Roles" column in the list and one Roles page per member
(`/admin/tenancy/user/<id>/roles/`, URL name `admin:tenancy_user_roles`) that gives or takes the
requester, approver, administrator and auditor roles through agentplatform.controlplane.role_grants
(dual control where it applies). Registered in place of tenancy's user admin (controlplane.admin).
"""
from __future__ import annotations

from django.contrib import admin, messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from core.text import is_row_id
from agentplatform.controlplane.role_grants import pending_role_changes, role_set
from agentplatform.controlplane.roles import ROLE_HELP, ROLE_LABELS, ROLES, roles_held
from agentplatform.tenancy.admin import TenantUserAdmin
from agentplatform.tenancy.models import User
from agentplatform.tenancy.roles import PLATFORM_OPERATOR
from core.errors import DomainError

OUTCOME_TEXT = {
    "granted": gettext_lazy("%(role)s: granted to %(user)s."),
    "revoked": gettext_lazy("%(role)s: taken away from %(user)s."),
    "proposed": gettext_lazy("%(role)s for %(user)s: proposed; a second administrator must approve it "
                             "(Pending control changes)."),
}


class RolesUserAdmin(TenantUserAdmin):
    """TenantUserAdmin plus the roles column and the Roles page."""

    list_display = ("username", "roles_shown", "tenant", "email", "is_service_account", "is_active")
    change_form_template = "admin/tenancy/user/change_form.html"

    def get_list_display(self, request: HttpRequest):
        shown = list(super().get_list_display(request))
        return [f for f in shown if f != "tenant"] if self.role(request) != PLATFORM_OPERATOR else shown

    def get_changelist_instance(self, request: HttpRequest):
        """Roles of the page's users in a fixed number of queries (roles_held), not one per row."""
        changelist = super().get_changelist_instance(request)
        rows = list(changelist.result_list)
        held = roles_held(rows)
        for user in rows:
            user._roles = held.get(user.pk, [])
        return changelist

    @admin.display(description=gettext_lazy("roles"))
    def roles_shown(self, obj: User) -> str:
        roles = getattr(obj, "_roles", None)
        if roles is None:
            roles = roles_held([obj])[obj.pk]
        url = reverse("admin:tenancy_user_roles", args=[obj.pk])
        names = format_html_join(", ", "{}", ((ROLE_LABELS[r],) for r in roles)) if roles else _("none")
        return format_html('<a href="{}" data-testid="roles-link">{}</a>', url, names)

    def get_urls(self):
        view = self.admin_site.admin_view(self.roles_view)
        return [path("<path:object_id>/roles/", view, name="tenancy_user_roles")] + super().get_urls()

    def roles_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """GET: the member's four roles, held or not, with what each gives and the changes still
        waiting for a second administrator. POST role=<role>&op=grant|revoke: role_set, then back
        here with a message. Another tenant's member, or an operator's account: 404."""
        if self.role(request) is None or not self.has_change_permission(request):
            raise Http404("no access")
        user = self.get_object(request, object_id) if is_row_id(object_id) else None
        if user is None or user.tenant_id is None:
            raise Http404("no such member")
        if request.method == "POST":
            return self._roles_post(request, user)
        held = roles_held([user])[user.pk]
        rows = [{"key": r, "label": ROLE_LABELS[r], "help": ROLE_HELP[r], "held": r in held} for r in ROLES]
        context = {**self.admin_site.each_context(request), "opts": self.model._meta, "original": user,
                   "title": _("Roles of %(user)s") % {"user": user.get_username()}, "rows": rows,
                   "pending": pending_role_changes(user), "service_account": user.is_service_account}
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/tenancy/user/roles.html", context)

    def _roles_post(self, request: HttpRequest, user: User) -> HttpResponse:
        role, op = request.POST.get("role", ""), request.POST.get("op", "")
        if op not in ("grant", "revoke"):
            self.message_user(request, _("Choose Grant or Take away."), messages.ERROR)
        else:
            try:
                outcome = role_set(actor=request.user, user_id=user.pk, role=role, grant=op == "grant")
            except DomainError as error:
                self.message_user(request, f"{error.message} [{error.code}]", messages.ERROR)
            else:
                label = ROLE_LABELS[outcome.role]
                level = messages.WARNING if outcome.outcome == "proposed" else messages.SUCCESS
                self.message_user(request, OUTCOME_TEXT[outcome.outcome] % {"role": label, "user": user.username},
                                  level)
                for note in outcome.notes:
                    self.message_user(request, note, messages.WARNING)
        return HttpResponseRedirect(reverse("admin:tenancy_user_roles", args=[user.pk]))
