"""guardian's object-permission pages of a tool, scoped by role: a platform operator grants
anything to anyone; a tenant administrator sees and grants only `use_tool` / `approve_tool`, only
to users and groups of their tenant (another tenant's user or group answers 404). Saves are
atomic, so each grant and its audit row commit together."""
from __future__ import annotations

from django.contrib.admin.utils import unquote
from django.db import transaction
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from guardian.shortcuts import get_groups_with_perms, get_users_with_perms

from core.errors import DomainError
from agentplatform.tenancy.admin_scope import refused_response, tenant_groups, tenant_users
from agentplatform.tenancy.roles import TENANT_ADMINISTRATOR
from tools.admin.forms import (TENANT_GRANTABLE, TenantGroupManage, TenantGroupPermsForm, TenantUserManage,
                               TenantUserPermsForm)


class ToolGrantsMixin:
    """guardian's object-permission views of ToolAdmin, scoped by role. Mixed into a
    GuardedModelAdmin that is also a TenantScopedAdminMixin (it uses `self.role`)."""

    def _grants_allowed(self, request) -> bool:
        return self.role(request) is not None

    def has_change_permission(self, request, obj=None) -> bool:
        # guardian's views ask has_change_permission(request, None); Tool rows themselves stay
        # read-only for tenant administrators (tenant_admin_can has no "change").
        if getattr(request, "_obj_perms_view", False):
            return self._grants_allowed(request)
        return super().has_change_permission(request, obj)

    def get_obj_perms_user_select_form(self, request):
        if self.role(request) != TENANT_ADMINISTRATOR:
            return super().get_obj_perms_user_select_form(request)
        return type("TenantUserManage", (TenantUserManage,), {"tenant_id": request.user.tenant_id})

    def get_obj_perms_group_select_form(self, request):
        if self.role(request) != TENANT_ADMINISTRATOR:
            return super().get_obj_perms_group_select_form(request)
        return type("TenantGroupManage", (TenantGroupManage,), {"tenant_id": request.user.tenant_id})

    def get_obj_perms_manage_user_form(self, request):
        return TenantUserPermsForm if self.role(request) == TENANT_ADMINISTRATOR else \
            super().get_obj_perms_manage_user_form(request)

    def get_obj_perms_manage_group_form(self, request):
        return TenantGroupPermsForm if self.role(request) == TENANT_ADMINISTRATOR else \
            super().get_obj_perms_manage_group_form(request)

    def obj_perms_manage_view(self, request, object_pk):
        """guardian's page for an operator; for a tenant administrator the same page listing only
        their tenant's users and groups, whose pickers find only those."""
        request._obj_perms_view = True
        if self.role(request) != TENANT_ADMINISTRATOR:
            return super().obj_perms_manage_view(request, object_pk)
        obj = get_object_or_404(self.get_queryset(request), pk=unquote(object_pk))
        tenant_id = request.user.tenant_id
        members = set(tenant_users(tenant_id).values_list("pk", flat=True))
        groups = set(tenant_groups(tenant_id).values_list("pk", flat=True))
        users_perms = sorted(((u, [p for p in perms if p in TENANT_GRANTABLE]) for u, perms in get_users_with_perms(
            obj, attach_perms=True, with_group_users=False).items() if u.pk in members), key=lambda i: i[0].username)
        groups_perms = sorted(((g, [p for p in perms if p in TENANT_GRANTABLE]) for g, perms in get_groups_with_perms(
            obj, attach_perms=True).items() if g.pk in groups), key=lambda i: i[0].name)
        user_form_class = self.get_obj_perms_user_select_form(request)
        group_form_class = self.get_obj_perms_group_select_form(request)
        user_form, group_form = user_form_class(), group_form_class()
        info = self.admin_site.name, self.model._meta.app_label, self.model._meta.model_name
        if request.method == "POST" and "submit_manage_user" in request.POST:
            user_form = user_form_class(request.POST)
            if user_form.is_valid():
                return redirect(reverse("%s:%s_%s_permissions_manage_user" % info,
                                        args=[obj.pk, user_form.cleaned_data["user"].pk]))
        elif request.method == "POST" and "submit_manage_group" in request.POST:
            group_form = group_form_class(request.POST)
            if group_form.is_valid():
                return redirect(reverse("%s:%s_%s_permissions_manage_group" % info,
                                        args=[obj.pk, group_form.cleaned_data["group"].pk]))
        context = self.get_obj_perms_base_context(request, obj)
        context.update({"users_perms": dict(users_perms), "groups_perms": dict(groups_perms),
                        "user_form": user_form, "group_form": group_form})
        request.current_app = self.admin_site.name
        return render(request, self.get_obj_perms_manage_template(), context)

    def get_obj_perms_base_context(self, request, obj):
        context = super().get_obj_perms_base_context(request, obj)
        if self.role(request) == TENANT_ADMINISTRATOR:
            context["model_perms"] = [p for p in context["model_perms"] if p.codename in TENANT_GRANTABLE]
        return context

    def obj_perms_manage_user_view(self, request, object_pk, user_id):
        request._obj_perms_view = True
        if self.role(request) == TENANT_ADMINISTRATOR and not tenant_users(request.user.tenant_id).filter(
                pk=user_id).exists():
            raise Http404("no such user")
        try:
            with transaction.atomic():
                return super().obj_perms_manage_user_view(request, object_pk, user_id)
        except DomainError as error:  # a refused grant (e.g. approve_tool to a service account)
            return refused_response(self, request, error)

    def obj_perms_manage_group_view(self, request, object_pk, group_id):
        request._obj_perms_view = True
        if self.role(request) == TENANT_ADMINISTRATOR and not tenant_groups(request.user.tenant_id).filter(
                pk=group_id).exists():
            raise Http404("no such group")
        try:
            with transaction.atomic():
                return super().obj_perms_manage_group_view(request, object_pk, group_id)
        except DomainError as error:  # a refused grant (e.g. approve_tool to a group with a service account)
            return refused_response(self, request, error)
