"""A person's credential is set by that person (docs/roles.md, "Trust model").

Whoever sets an account's password, or its e-mail address (the password-reset link goes there),
can sign in as it. An administrator or operator who could do that to an approver would decide
*as* that approver, alone, and the trail would name the approver; to another administrator, they
would approve their own control changes as that administrator. So, for an account that has
signed in (it is somebody's now), or holds `approve_tool` (directly, through a group, or
globally), or is staff or a superuser, only its owner sets a usable password or a new non-empty
address:

- the owner themselves (their password page, the reset link sent to their stored address, which
  is answered without a signed-in actor);
- nobody acting (`manage.py shell`, `changepassword`, the demo seed): outside the tenant model.

Anyone else (a tenant administrator, a platform operator) is refused with CredentialChangeRefused
before anything is written, on every path that saves the user (the admin's password and change
forms, a service, a shell under `acting_as`). Taking access away stays open to them: an unusable
password, a cleared address, deactivation. A new account's first password is set by whoever
creates it, until it signs in or is made an approver or administrator: the owner then chooses
their own (docs/roles.md says an approver grant is proposed for an account after its first sign-in).
"""
from __future__ import annotations

from typing import Any

from django.db.models.signals import pre_save

from agentplatform.controlplane.errors import CredentialChangeRefused
from agentplatform.tenancy.actor import current_actor
from agentplatform.tenancy.models import User
from agentplatform.tenancy.service_accounts import holds_approve


def _protected(stored: User) -> str:
    """Why `stored`'s credential is its owner's alone ("" when it is not yet)."""
    if stored.is_superuser or stored.is_staff:
        return "an administrator"
    if holds_approve(stored):
        return "an approver"
    if stored.last_login is not None:
        return "an account its owner has signed in to"
    return ""


def _credential_changes(stored: User, instance: User) -> list[str]:
    changed = []
    if instance.password != stored.password and instance.has_usable_password():
        changed.append("password")
    if (instance.email or "").strip().lower() != (stored.email or "").strip().lower() and (instance.email or "").strip():
        changed.append("e-mail address")
    return changed


def check_user_save(sender, instance: User, raw: bool = False, **kwargs: Any) -> None:
    """pre_save of User: raise CredentialChangeRefused when someone other than the account's owner
    sets a usable password or a new address of a protected account (module docstring)."""
    if raw or instance._state.adding or instance.pk is None:
        return
    if set(kwargs.get("update_fields") or ()) == {"password"} and getattr(instance, "_password", "") is None:
        return  # check_password re-hashing the password just typed with a newer hasher: not a change
    actor = current_actor()
    if actor is None or actor.pk == instance.pk:
        return
    stored = User.objects.filter(pk=instance.pk).first()
    if stored is None:
        return
    changed = _credential_changes(stored, instance)
    why = _protected(stored) if changed else ""
    if why:
        raise CredentialChangeRefused(
            f"only {instance.username} sets their own {' and '.join(changed)}: the account is {why}, and whoever "
            "sets it could act as them; send them the reset link (to their stored address) or lock the account "
            "instead / 只有本人可以设置自己的密码或邮箱；请让本人通过重置链接修改，或停用该账号")


def connect() -> None:
    """Connect the rule (AppConfig.ready)."""
    pre_save.connect(check_user_save, sender=User, dispatch_uid="controlplane-credentials-user")
