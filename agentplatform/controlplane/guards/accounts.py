"""Guards on administrators and re-activation: an account made staff (a tenant administrator) or
superuser (a platform operator), an account born or given a tenant as an administrator, and the
re-activation of an account that holds approve_tool (directly or through a group) or is an
administrator. Deactivating and taking the status away are never guarded.
"""
from __future__ import annotations

from typing import Any

from django.db.models.signals import post_save, pre_save

from agentplatform.controlplane.errors import ControlChangeForbidden
from agentplatform.controlplane.guards.gate import Gated, applying_change, gate, record_standing
from agentplatform.controlplane.guards.grants import user_approves
from agentplatform.tenancy.actor import current_actor
from agentplatform.tenancy.models import User

ADMIN_FIELDS = ("is_staff", "is_superuser")


def _new_administrator(instance: User) -> None:
    """A person creating an account that is born staff or superuser, or giving a tenant to a staff
    account without one (which makes it that tenant's administrator at once): refused (there is
    no administrator yet to propose the change for). Create it, or give the tenant, without staff
    status, then propose making it an administrator."""
    if applying_change() is None and current_actor() is not None:
        raise ControlChangeForbidden("create the account without staff or superuser status, then propose making it "
                                     "an administrator (a second administrator approves) "
                                     "/ 请先创建普通账号，再提议设为管理员")


def _admin_gated(instance: User, stored: dict[str, Any]) -> Gated | None:
    """Making `instance` staff (a tenant administrator) or a superuser (a platform operator): a
    second administrator would be the second person of every later change, so one person alone
    could approve their own proposals with an account they made. A superuser is platform-wide
    (tenant None: another operator decides); staff concerns the account's tenant."""
    raised = {name: True for name in ADMIN_FIELDS if getattr(instance, name) and not stored[name]}
    if not raised or not instance.is_active:
        return None
    operator = "is_superuser" in raised
    return Gated("ADMIN", None if operator else instance.tenant_id, {"user_id": instance.pk, "fields": raised},
                 {name: False for name in raised}, {**raised, "user": instance.username},
                 f"make {instance.username} " + ("a platform operator" if operator else "a tenant administrator"))


def _user_pre_save(sender, instance, raw=False, **kwargs) -> None:
    instance._reactivated = False
    if raw:
        return
    if instance._state.adding or instance.pk is None:
        if instance.is_staff or instance.is_superuser:
            _new_administrator(instance)
        return
    stored = User.objects.filter(pk=instance.pk).values("is_active", "tenant_id", *ADMIN_FIELDS).first()
    if stored is None:
        return
    if stored["tenant_id"] is None and instance.tenant_id is not None and instance.is_staff \
            and not instance.is_superuser:
        _new_administrator(instance)  # staff without a tenant given one: a tenant administrator at once
    gated = []
    if instance.is_active and stored["is_active"] is False:
        instance._reactivated = True
        if user_approves(instance.pk):
            gated.append(Gated("REACTIVATION", instance.tenant_id, {"user_id": instance.pk}, {"is_active": False},
                               {"is_active": True}, f"re-activate {instance.username}, who holds approve_tool"))
        elif any(stored[name] and getattr(instance, name) for name in ADMIN_FIELDS):
            gated.append(Gated("REACTIVATION", instance.tenant_id, {"user_id": instance.pk}, {"is_active": False},
                               {"is_active": True}, f"re-activate {instance.username}, an administrator"))
        stored = {**stored, "is_active": True}
    admin = _admin_gated(instance, stored)
    if admin is not None:
        gated.append(admin)
    gate(gated)


def _user_post_save(sender, instance, created, raw=False, **kwargs) -> None:
    if not raw and getattr(instance, "_reactivated", False):
        record_standing(kind="ACTIVATION", user_id=instance.pk)
        instance._reactivated = False


def connect() -> None:
    """Connect these guards (AppConfig.ready)."""
    pre_save.connect(_user_pre_save, sender=User, dispatch_uid="dualcontrol-user-pre")
    post_save.connect(_user_post_save, sender=User, dispatch_uid="dualcontrol-user-post")
