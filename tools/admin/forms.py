"""Forms and form helpers of the tools admin: rows labelled for assistive technology, guardian's
user and group pickers and object-permission forms limited to a tenant administrator's tenant and
to the permissions they may grant, and the one-line description of a policy in effect."""
from __future__ import annotations

from django.forms import ValidationError
from django.forms.models import BaseInlineFormSet
from guardian.admin import (
    AdminGroupObjectPermissionsForm,
    AdminUserObjectPermissionsForm,
    GroupManage,
    UserManage,
)

from agentplatform.tenancy.admin_scope import tenant_groups, tenant_users
from tools.policy import EffectivePolicy

# What a tenant administrator may grant on a tool (guardian object permissions). Django's own
# add/change/delete/view_tool are platform operators' business.
TENANT_GRANTABLE = ("use_tool", "approve_tool")


def describe(policy: EffectivePolicy | None) -> str:
    if policy is None:
        return "not registered in code: never offered"
    return f"risk {policy.risk}, policy {policy.policy}, quorum {policy.quorum}, TTL {policy.ttl_seconds} s"


def label_row_fields(form) -> None:
    """Name each field of a form shown as one row of a table (a changelist's editable column, a
    tabular inline) for assistive technology: such tables have column headers but no <label>, so
    each input gets an aria-label "<field> (<row's object>)" (axe-core `label`, `select-name`)."""
    row = str(form.instance) if form.instance.pk else "new entry / 新条目"
    for name, field in form.fields.items():
        widget = field.widget
        target = getattr(widget, "widget", widget)  # a RelatedFieldWidgetWrapper wraps the <select>
        if "aria-label" not in target.attrs:  # a new dict: widgets' attrs may be shared between copies
            target.attrs = {**target.attrs, "aria-label": f"{field.label or name} ({row})"}
            if target is not widget:
                widget.attrs = target.attrs


class LabelledRowsFormSet(BaseInlineFormSet):
    """An inline formset whose rows' inputs are labelled (the DELETE box included)."""

    def add_fields(self, form, index) -> None:
        super().add_fields(form, index)
        label_row_fields(form)


class LabelledChangelistMixin:
    """A ModelAdmin whose changelist's editable columns are labelled per row."""

    def get_changelist_form(self, request, **kwargs):
        base = super().get_changelist_form(request, **kwargs)

        class Labelled(base):
            def __init__(self, *args, **kw) -> None:
                super().__init__(*args, **kw)
                label_row_fields(self)

        return Labelled


class TenantUserManage(UserManage):
    """guardian's user picker, limited to the tenant administrator's own tenant (else: "does not exist")."""

    tenant_id: int

    def clean_user(self):
        user = super().clean_user()
        if not tenant_users(self.tenant_id).filter(pk=user.pk).exists():
            raise ValidationError(self.fields["user"].error_messages["does_not_exist"])
        return user


class TenantGroupManage(GroupManage):
    tenant_id: int

    def clean_group(self):
        group = super().clean_group()
        if not tenant_groups(self.tenant_id).filter(pk=group.pk).exists():
            raise ValidationError(self.fields["group"].error_messages["does_not_exist"])
        return group


class _LimitedChoices:
    """guardian's object-permission form offering only `use_tool` and `approve_tool`; saving
    touches only those (guardian's save_obj_perms works on the offered choices)."""

    def get_obj_perms_field_choices(self):
        return [(code, name) for code, name in super().get_obj_perms_field_choices() if code in TENANT_GRANTABLE]


class TenantUserPermsForm(_LimitedChoices, AdminUserObjectPermissionsForm):
    pass


class TenantGroupPermsForm(_LimitedChoices, AdminGroupObjectPermissionsForm):
    pass


