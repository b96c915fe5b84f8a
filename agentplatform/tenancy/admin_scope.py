"""Tenant scoping for every ModelAdmin and inline (docs/roles.md).

A platform operator gets Django's ordinary admin. A tenant administrator gets, on every admin
that uses these mixins: querysets filtered to their tenant (another tenant's object is not in the
queryset, so its change, delete, history and object-permission pages answer 404), foreign-key
and many-to-many choices limited to their tenant, the tenant list filters removed (they would
list every tenant), and exactly the capabilities the admin class declares in
`tenant_admin_can`, whatever permission boxes are ticked on their account. Anyone else who
reaches the admin (staff without a tenant) sees nothing.
"""
from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.admin.utils import unquote
from django.contrib.auth.models import Group, Permission
from django.db.models import Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponseRedirect

from core.errors import DomainError

from agentplatform.tenancy.models import Tenant, User
from agentplatform.tenancy.roles import PLATFORM_OPERATOR, TENANT_ADMINISTRATOR, admin_role


def tenant_users(tenant_id: int) -> QuerySet[User]:
    """Members of one tenant a tenant administrator may manage (never a superuser)."""
    return User.objects.filter(tenant_id=tenant_id, is_superuser=False)


def tenant_groups(tenant_id: int) -> QuerySet[Group]:
    """Groups that belong to one tenant (TenantGroup); platform-wide groups are not among them."""
    return Group.objects.filter(tenant_link__tenant_id=tenant_id)


def held_permissions(user: Any) -> QuerySet[Permission]:
    """The global permissions `user` holds (directly or through groups): what they may delegate."""
    if user.is_superuser:
        return Permission.objects.all()
    return Permission.objects.filter(Q(user=user) | Q(group__user=user)).distinct()


def scoped_choices(model: type, tenant_id: int) -> QuerySet | None:
    """Choices a tenant administrator may pick for a relation to `model`, or None when `model`
    is not tenant-owned (tools, content types)."""
    if model is Tenant:
        return Tenant.objects.filter(pk=tenant_id)
    if model is User:
        return tenant_users(tenant_id)
    if model is Group:
        return tenant_groups(tenant_id)
    return None


def tenant_in_scope(request) -> int | None:
    """The one tenant the changelist shows: a tenant administrator's, or the tenant an operator
    filtered on (`?tenant__id__exact=`); None when rows of every tenant are listed."""
    user = request.user
    if not user.is_superuser and getattr(user, "tenant_id", None) is not None:
        return user.tenant_id
    raw = request.GET.get("tenant__id__exact", "")
    return int(raw) if raw.isdigit() else None


class TenantScopedMixin:
    """For ModelAdmin and InlineModelAdmin subclasses (put it first in the bases).

    tenant_path: lookup from the model to its tenant id ("tenant_id", "request__tenant_id", "pk"
    for Tenant itself), or None for a global model every tenant administrator may read (Tool).
    tenant_admin_can: subset of {"view", "add", "change", "delete"} granted to tenant
    administrators. tenant_hidden_filters: list_filter entries hidden from them.
    """

    tenant_path: str | None = "tenant_id"
    tenant_admin_can: frozenset[str] = frozenset({"view"})
    tenant_hidden_filters: tuple[str, ...] = ("tenant",)

    # -- who --------------------------------------------------------------------------------------
    @staticmethod
    def role(request: HttpRequest) -> str | None:
        return admin_role(request.user)

    def scoped_queryset(self, request: HttpRequest, qs: QuerySet) -> QuerySet:
        role = self.role(request)
        if role == PLATFORM_OPERATOR:
            return qs
        if role == TENANT_ADMINISTRATOR:
            return qs if self.tenant_path is None else qs.filter(**{self.tenant_path: request.user.tenant_id})
        return qs.none()

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return self.scoped_queryset(request, super().get_queryset(request))

    def _get_obj_does_not_exist_redirect(self, request, opts, object_id):
        """Django redirects to the index for a missing object; here an object outside the viewer's
        scope (or none at all) answers 404, as the API does: nothing tells the two apart."""
        raise Http404(f"{opts.verbose_name} not found")

    def delete_view(self, request, object_id, extra_context=None):
        """404 before 403: an object outside the scope does not exist for this viewer."""
        if self.get_object(request, unquote(object_id)) is None:
            raise Http404(f"{self.model._meta.verbose_name} not found")
        return super().delete_view(request, object_id, extra_context)

    def _may(self, request: HttpRequest, action: str, parent) -> bool:
        role = self.role(request)
        if role == PLATFORM_OPERATOR:
            return parent()
        return role == TENANT_ADMINISTRATOR and action in self.tenant_admin_can

    def has_module_permission(self, request: HttpRequest) -> bool:
        if self.role(request) == PLATFORM_OPERATOR:
            return super().has_module_permission(request)
        return self.role(request) == TENANT_ADMINISTRATOR and bool(self.tenant_admin_can)

    def has_view_permission(self, request: HttpRequest, obj=None) -> bool:
        return (self._may(request, "view", lambda: super(TenantScopedMixin, self).has_view_permission(request, obj))
                or self.has_change_permission(request, obj))

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return self._may(request, "change", lambda: super(TenantScopedMixin, self).has_change_permission(request, obj))

    def has_add_permission(self, request: HttpRequest, *args) -> bool:
        return self._may(request, "add", lambda: super(TenantScopedMixin, self).has_add_permission(request, *args))

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return self._may(request, "delete", lambda: super(TenantScopedMixin, self).has_delete_permission(request, obj))

    # -- choices ----------------------------------------------------------------------------------
    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if self.role(request) == TENANT_ADMINISTRATOR:
            choices = scoped_choices(db_field.related_model, request.user.tenant_id)
            if choices is not None:
                kwargs["queryset"] = choices
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        if self.role(request) == TENANT_ADMINISTRATOR:
            choices = scoped_choices(db_field.related_model, request.user.tenant_id)
            if choices is not None:
                kwargs["queryset"] = choices
        return super().formfield_for_manytomany(db_field, request, **kwargs)


class TenantScopedAdminMixin(TenantScopedMixin):
    """TenantScopedMixin plus what only a ModelAdmin has (list filters, saving the tenant, domain
    errors of a save shown as messages)."""

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        """A refusal raised while saving (a domain error of the control-plane rules, e.g. a
        service account put into an approvers' group) rolls the save back with the admin's own
        transaction and is shown as an error message on the form page, not as a server error."""
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except DomainError as error:
            return refused_response(self, request, error)

    def get_list_filter(self, request: HttpRequest):
        filters = super().get_list_filter(request)
        if self.role(request) == PLATFORM_OPERATOR:
            return filters
        return [f for f in filters if (f[0] if isinstance(f, (tuple, list)) else f) not in self.tenant_hidden_filters]

    def save_model(self, request, obj, form, change) -> None:
        """A tenant administrator's rows always land in their tenant, whatever was posted."""
        if self.role(request) == TENANT_ADMINISTRATOR and self.tenant_path == "tenant_id":
            obj.tenant_id = request.user.tenant_id
        super().save_model(request, obj, form, change)


def refused_response(model_admin: Any, request: HttpRequest, error: DomainError) -> HttpResponseRedirect:
    """Show a domain error raised by an admin write as an error message and send the browser back
    to the page it posted from (the write was rolled back). Returns the redirect. An error that
    becomes a proposal (`becomes_proposal`, the control plane's CONTROL_CHANGE_REQUIRED) is raised
    again instead, for the middleware that turns it into a pending change: shown as an error, the
    administrator would have no way to propose the change from the admin at all."""
    if getattr(error, "becomes_proposal", False):
        raise error

    model_admin.message_user(request, f"{error.message} [{error.code}]", messages.ERROR)
    return HttpResponseRedirect(request.get_full_path())


def guard_m2m_changes(form_class: type, *, allowed: dict[str, set[int]], current: dict[str, set[int]],
                      model_of: dict[str, type]) -> type:
    """Wrap a ModelForm class so that, for each named many-to-many field, only items in
    `allowed[name]` can be added or removed; items outside it that the object already has stay
    shown and kept (a tenant administrator cannot take a user out of a platform-wide group either).
    Returns the subclass; an attempt outside the allowed set is a form error on that field."""

    class Guarded(form_class):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            for name, ids in allowed.items():
                if name in self.fields:
                    self.fields[name].queryset = model_of[name].objects.filter(pk__in=ids | current[name])

        def clean(self):
            data = super().clean()
            for name, ids in allowed.items():
                if name in data and data[name] is not None:
                    chosen = {obj.pk for obj in data[name]}
                    if (chosen ^ current[name]) - ids:
                        self.add_error(name, "You may only add or remove items your role lets you delegate.")
            return data

    Guarded.__name__ = form_class.__name__
    return Guarded
