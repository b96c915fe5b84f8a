"""Writes of the API app: API keys for programs (django-rest-knox, digest only; issue 9, item 7)."""
from __future__ import annotations

import datetime
import uuid
from contextlib import nullcontext

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agentplatform.api.models import ApiKey
from agentplatform.errors import InvalidInput, NotFound, PermissionDenied
from agentplatform.tenancy.actor import acting_as


@transaction.atomic(durable=True)
def api_key_issue(*, user, name: str, expires_in_days: int | None = None, actor=None) -> tuple[ApiKey, str]:
    """Create an API key for `user`; return (the stored ApiKey, the raw key shown once).

    expires_in_days: None = API_KEY_TTL_DAYS; 0 = never (refused when API_KEY_TTL_DAYS > 0 and
    API_KEY_ALLOW_NO_EXPIRY is off). actor: who asked (the owner, a tenant administrator of the
    owner's tenant, a platform operator; None for the command line). Raises PermissionDenied for an
    inactive user or an actor of another tenant, InvalidInput for a blank name or a bad expiry.
    Audited (CONTROL_CHANGE, api_token, CREATED) in the same transaction.
    """
    if not user.is_active:
        raise PermissionDenied("an inactive user cannot have an API key")
    if actor is not None and not _may_manage(actor, user):
        raise PermissionDenied("you may only issue API keys for yourself or your tenant's members")
    name = (name or "").strip()[:100]
    if not name:
        raise InvalidInput("an API key needs a name")
    days = settings.API_KEY_TTL_DAYS if expires_in_days is None else expires_in_days
    if days < 0 or days > settings.API_KEY_MAX_TTL_DAYS:
        raise InvalidInput(f"expires_in_days must be between 0 and {settings.API_KEY_MAX_TTL_DAYS}")
    if days == 0 and settings.API_KEY_TTL_DAYS and not settings.API_KEY_ALLOW_NO_EXPIRY:
        raise InvalidInput("keys without expiry are not allowed here (API_KEY_ALLOW_NO_EXPIRY)")
    # Audited by the control-plane receivers (agentplatform.controlplane, kind api_token) in this
    # transaction, with `actor` as the actor (None: the row says no actor was named).
    with acting_as(actor) if actor is not None else nullcontext():
        key, raw = ApiKey.objects.create(user=user, expiry=datetime.timedelta(days=days) if days else None, name=name)
    return key, raw


def _may_manage(actor, owner) -> bool:
    """The owner, a platform operator, or a tenant administrator of the owner's tenant (never for
    a superuser's keys) (docs/roles.md)."""
    from agentplatform.tenancy.roles import PLATFORM_OPERATOR, TENANT_ADMINISTRATOR, admin_role

    if actor.pk == owner.pk or admin_role(actor) == PLATFORM_OPERATOR:
        return True
    return (admin_role(actor) == TENANT_ADMINISTRATOR and not owner.is_superuser
            and actor.tenant_id is not None and actor.tenant_id == owner.tenant_id)


@transaction.atomic  # not durable: the admin's delete view calls it inside its own transaction
def api_key_revoke(*, public_id: uuid.UUID | str, actor) -> None:
    """Revoke (delete) one API key: by its owner, a tenant administrator of the owner's tenant, or
    a platform operator. Raises NotFound for an unknown key or one the actor may not manage (another
    tenant's key answers 404, not 403). Audited (CONTROL_CHANGE, api_token, DELETED)."""
    key = (ApiKey.objects.select_for_update(of=("self",)).select_related("user")
           .filter(public_id=public_id).first())
    if key is None or not _may_manage(actor, key.user):
        raise NotFound("unknown API key")
    with acting_as(actor):
        key.delete()  # audited by the control-plane receivers (DELETED, kind api_token)


def api_token_issue(*, user, rotate: bool = False, name: str = "default", actor=None) -> str:
    """Issue a new API key for `user` and return it (shown once; only its digest is kept).

    For `manage.py issue_api_token` and the users' admin action, whose callers are authorised
    already; the audit rows name the actor of the surrounding request or `acting_as` block (or
    `actor`). rotate: revoke the user's other keys first, so they stop working at once. Raises
    PermissionDenied for an inactive user.
    """
    if not user.is_active:
        raise PermissionDenied("an inactive user cannot have an API key")
    with acting_as(actor) if actor is not None else nullcontext():
        if rotate:
            for key in ApiKey.objects.filter(user=user):
                key.delete()  # audited by the control-plane receivers, one row per key
        key, raw = ApiKey.objects.create(user=user, name=name, expiry=(
            datetime.timedelta(days=settings.API_KEY_TTL_DAYS) if settings.API_KEY_TTL_DAYS else None))
    return raw


def api_keys_expired_prune() -> int:
    """Delete expired keys (knox deletes them on sight too); returns how many."""
    deleted, _ = ApiKey.objects.filter(expiry__lt=timezone.now()).delete()
    return deleted
