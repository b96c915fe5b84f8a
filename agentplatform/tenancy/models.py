"""Tenants and the users who belong to them. Everything else is scoped by tenant."""
from __future__ import annotations

from django.contrib.auth.models import AbstractUser
from django.db import models, transaction
from django.utils.crypto import salted_hmac

from agentplatform.tenancy.moves import user_tenant_moved, user_tenant_moving

# What `User._tenant_before_save` answers when the save cannot move the user between tenants.
_NOT_MOVED = object()


class Tenant(models.Model):
    """One customer organisation. `slug` is its stable public name."""

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class User(AbstractUser):
    """A person (or program) acting inside exactly one tenant (the membership).

    `tenant` is null only for platform operators without business data. `is_service_account`
    marks a program's account (an integration), not a person: it never has a usable password,
    never signs in to the web pages, may be granted `use_tool`, and never holds `approve_tool` or
    counts toward a quorum (agentplatform.tenancy.service_accounts; docs/roles.md).

    Saving a change of `tenant` ends the authority of the old tenant in the same transaction
    (agentplatform.tenancy.moves): grants, memberships, staff status, keys, sessions, open
    requests and running runs.
    """

    tenant = models.ForeignKey(Tenant, null=True, blank=True, on_delete=models.PROTECT, related_name="users")
    is_service_account = models.BooleanField(
        "service account", default=False,
        help_text="A program's account (an integration), not a person: no password sign-in, may use tools, "
                  "can never approve. 服务账号：供程序集成使用，不能登录网页，永远不能审批。")

    class Meta(AbstractUser.Meta):
        swappable = "AUTH_USER_MODEL"

    def save(self, *args, **kwargs) -> None:
        """Save; a service account's password is made unusable (a program authenticates with its
        API key only), and a change of tenant runs the move's clean-up in the same transaction
        (agentplatform.tenancy.moves.user_tenant_moved). Raises whatever the clean-up or the
        control-plane rules raise (the save is rolled back with it)."""
        update_fields = kwargs.get("update_fields")
        if self.is_service_account and self.has_usable_password():
            self.set_unusable_password()
            if update_fields is not None:
                kwargs["update_fields"] = update_fields = {*update_fields, "password"}
        moved_from = self._tenant_before_save(update_fields)
        self._moved_from_tenant = None
        if moved_from is _NOT_MOVED:
            super().save(*args, **kwargs)
            return
        with transaction.atomic():
            user_tenant_moving(user=self)
            if update_fields is not None:
                kwargs["update_fields"] = {*update_fields, "is_staff"}
            super().save(*args, **kwargs)
            user_tenant_moved(user=self, old_tenant_id=moved_from)
        self._moved_from_tenant = moved_from  # the admin reads it: the form's old m2m values are not saved back

    def _tenant_before_save(self, update_fields) -> object:
        """The stored tenant id when this save changes it (None: had no tenant), else _NOT_MOVED.
        An account without a tenant (a platform operator) that is given one is not a move: it had
        no tenant's authority to end."""
        if self._state.adding or self.pk is None or (update_fields is not None and "tenant" not in update_fields
                                                     and "tenant_id" not in update_fields):
            return _NOT_MOVED
        stored = type(self)._default_manager.filter(pk=self.pk).values_list("tenant_id", flat=True).first()
        if stored is None or stored == self.tenant_id:
            return _NOT_MOVED
        return stored

    def _get_session_auth_hash(self, secret=None) -> str:
        """Django's session hash (an HMAC of the password field) extended with the tenant id: every
        web session of a user ends when they move to another tenant, as it does when their password
        changes. Deploying this logs every signed-in user out once (docs/roles.md)."""
        return salted_hmac("agentplatform.tenancy.models.User.get_session_auth_hash",
                           f"{self.password}\x00tenant:{self.tenant_id}", secret=secret,
                           algorithm="sha256").hexdigest()


class TenantGroup(models.Model):
    """Makes an auth Group belong to one tenant. A group without this row is platform-wide and is
    managed by platform operators only (docs/roles.md); a tenant administrator sees, creates and
    fills only the groups of their tenant."""

    group = models.OneToOneField("auth.Group", primary_key=True, on_delete=models.CASCADE, related_name="tenant_link")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="groups")

    class Meta:
        verbose_name = "tenant of a group"

    def __str__(self) -> str:
        return f"{self.group_id} in {self.tenant_id}"
