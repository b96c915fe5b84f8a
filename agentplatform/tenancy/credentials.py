"""Credentials: API keys for programs (django-rest-knox, digest only): issue, revoke, prune.

Each public function runs in a transaction of its own; `api_key_revoke` and `api_token_issue` join
a caller's when there is one (the admin's delete view and action call them inside theirs), the
others are durable. None requires a caller's transaction. The key model is knox's swapped token model (KNOX_TOKEN_MODEL, `api.ApiKey`), looked
up through `knox.models.get_token_model()` as `get_user_model()` is, so tenancy does not import
the API layer above it.

Who receives a key (docs/operations.md, "API keys"; docs/roles.md): a key's secret is shown once,
to the user it authenticates and to no one else. Administrators and operators list and revoke
keys; they never receive one for another person (KeyForAnotherPerson, 403). A service account
has no human owner: a tenant administrator of its tenant or a platform operator receives its key
(shown once to them, audited). An operator at a server's shell issues keys with
`manage.py issue_api_token` (audited as the shell).
"""
from __future__ import annotations

import datetime
import uuid
from contextlib import nullcontext
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from knox.models import get_token_model

from core.errors import InvalidInputError, NotFoundError, PermissionDeniedError
from agentplatform.tenancy.actor import acting_as
from agentplatform.tenancy.roles import PLATFORM_OPERATOR, TENANT_ADMINISTRATOR, admin_role
from agentplatform.tenancy.service_accounts import is_service_account
from audit import events


class KeyForAnotherPerson(PermissionDeniedError):
    """An API key was asked for someone other than the asker who is a person: a key is shown only
    to the person it authenticates (docs/operations.md, "API keys"). HTTP 403; nothing is created."""

    code = "KEY_FOR_ANOTHER_PERSON"


def api_key_issue(*, user, name: str, expires_in_days: int | None = None, actor=None) -> tuple[Any, str]:
    """Create an API key for `user`; return (the stored ApiKey row, the raw key shown once).

    expires_in_days: None = API_KEY_TTL_DAYS; 0 = never (refused when API_KEY_TTL_DAYS > 0 and
    API_KEY_ALLOW_NO_EXPIRY is off). actor: who asked and will see the key: the owner, or for a
    service account a tenant administrator of its tenant or a platform operator (`may_receive_key`);
    None for the command line (an operator at the shell). Raises KeyForAnotherPerson (403) when
    `actor` asks for another person's key, PermissionDeniedError for an inactive user or a service
    account the actor does not administer, InvalidInputError for a blank name or a bad expiry. Audited
    (CONTROL_CHANGE, api_token, CREATED) in the same transaction; nothing is created when refused.
    """
    if actor is not None:
        _require_or_audit(actor=actor, owner=user)
    return _api_key_create(user=user, name=name, expires_in_days=expires_in_days, actor=actor)


@transaction.atomic(durable=True)
def _api_key_create(*, user, name: str, expires_in_days: int | None, actor) -> tuple[Any, str]:
    if not user.is_active:
        raise PermissionDeniedError("an inactive user cannot have an API key")
    name = (name or "").strip()[:100]
    if not name:
        raise InvalidInputError("an API key needs a name")
    days = settings.API_KEY_TTL_DAYS if expires_in_days is None else expires_in_days
    _check_expiry(days)
    # Audited by the control-plane receivers (agentplatform.controlplane, kind api_token) in this
    # transaction, with `actor` as the actor (None: the row says no actor was named).
    with acting_as(actor) if actor is not None else nullcontext():
        key, raw = get_token_model().objects.create(user=user, expiry=datetime.timedelta(days=days) if days else None, name=name)
    return key, raw


def require_may_receive_key(*, actor, owner) -> None:
    """Whether `actor` may receive a new secret key that authenticates `owner`: only the owner
    themselves, or, for a service account (no human owner), a platform operator or a tenant
    administrator of its tenant. Raises KeyForAnotherPerson for another person (whoever asks:
    administrators and operators list and revoke keys, never receive one for someone else) and
    PermissionDeniedError for a service account the actor does not administer. Returns None."""
    if actor.pk == owner.pk:
        return
    if not is_service_account(owner):
        raise KeyForAnotherPerson(
            "an API key is shown only to the person it authenticates; ask them to create it themselves "
            "/ API 密钥只显示给其本人，请让本人自行创建")
    role = admin_role(actor)
    if role == PLATFORM_OPERATOR or (role == TENANT_ADMINISTRATOR and actor.tenant_id is not None
                                     and actor.tenant_id == owner.tenant_id):
        return
    raise PermissionDeniedError("only a tenant administrator of its tenant or a platform operator may issue "
                           "a service account's key")


def _require_or_audit(*, actor, owner) -> None:
    """`require_may_receive_key`, with a refusal written to the trail (outside any transaction:
    nothing was created to roll back) before it is raised."""
    try:
        require_may_receive_key(actor=actor, owner=owner)
    except PermissionDeniedError as error:
        tenant_id = actor.tenant_id or owner.tenant_id
        if tenant_id is not None:
            events.api_key_refused(tenant_id=tenant_id, status=error.code, actor_id=actor.pk,
                          masked_arguments={"object": {"type": "api_token", "id": f"token of {owner.username}"}},
                          message=f"API key for {owner.username} refused to {actor.username}: {error.message}")
        raise


def _may_manage(actor, owner) -> bool:
    """The owner, a platform operator, or a tenant administrator of the owner's tenant (never for
    a superuser's keys) (docs/roles.md)."""
    if actor.pk == owner.pk or admin_role(actor) == PLATFORM_OPERATOR:
        return True
    return (admin_role(actor) == TENANT_ADMINISTRATOR and not owner.is_superuser
            and actor.tenant_id is not None and actor.tenant_id == owner.tenant_id)


@transaction.atomic  # not durable: the admin's delete view calls it inside its own transaction
def api_key_revoke(*, public_id: uuid.UUID | str, actor) -> None:
    """Revoke (delete) one API key: by its owner, a tenant administrator of the owner's tenant, or
    a platform operator. Raises NotFoundError for an unknown key or one the actor may not manage (another
    tenant's key answers 404, not 403). Audited (CONTROL_CHANGE, api_token, DELETED)."""
    key = (get_token_model().objects.select_for_update(of=("self",)).select_related("user")
           .filter(public_id=public_id).first())
    if key is None or not _may_manage(actor, key.user):
        raise NotFoundError("unknown API key")
    with acting_as(actor):
        key.delete()  # audited by the control-plane receivers (DELETED, kind api_token)


def api_token_issue(*, user, rotate: bool = False, name: str = "default", actor=None,
                    expires_in_days: int | None = None) -> str:
    """Issue a new API key for `user` and return it (shown once; only its digest is kept).

    actor None: `manage.py issue_api_token` at a server's shell (an operator; the command names
    the channel in the audit rows), or test set-up. actor given (the users' admin action): the
    same rule as the API (`require_may_receive_key`: only a service account's key may be
    received by its administrator). rotate: revoke the user's other keys first, so they stop
    working at once. expires_in_days as `api_key_issue`. Raises KeyForAnotherPerson,
    PermissionDeniedError (inactive user), InvalidInputError (bad expiry); nothing changes when refused.
    """
    if actor is not None:
        _require_or_audit(actor=actor, owner=user)
    return _api_token_create(user=user, rotate=rotate, name=name, actor=actor, expires_in_days=expires_in_days)


@transaction.atomic  # not durable: the admin action and test set-ups call it inside their own
def _api_token_create(*, user, rotate: bool, name: str, actor, expires_in_days: int | None) -> str:
    if not user.is_active:
        raise PermissionDeniedError("an inactive user cannot have an API key")
    days = settings.API_KEY_TTL_DAYS if expires_in_days is None else expires_in_days
    _check_expiry(days)
    with acting_as(actor) if actor is not None else nullcontext():
        if rotate:
            for key in get_token_model().objects.filter(user=user):
                key.delete()  # audited by the control-plane receivers, one row per key
        key, raw = get_token_model().objects.create(user=user, name=(name or "default").strip()[:100] or "default",
                                         expiry=datetime.timedelta(days=days) if days else None)
    return raw


def _check_expiry(days: int) -> None:
    if days < 0 or days > settings.API_KEY_MAX_TTL_DAYS:
        raise InvalidInputError(f"expires_in_days must be between 0 and {settings.API_KEY_MAX_TTL_DAYS}")
    if days == 0 and settings.API_KEY_TTL_DAYS and not settings.API_KEY_ALLOW_NO_EXPIRY:
        raise InvalidInputError("keys without expiry are not allowed here (API_KEY_ALLOW_NO_EXPIRY)")


def api_keys_revoke_for_moved_user(sender, *, user, old_tenant_id, **kwargs) -> int:
    """On `user_tenant_changed` (inside the move's transaction): revoke every API key of the moved
    user; each deletion is audited by the control-plane receivers. Returns how many."""
    revoked = 0
    for key in get_token_model().objects.filter(user=user).order_by("created"):
        key.delete()
        revoked += 1
    return revoked


def api_keys_expired_prune() -> int:
    """Delete expired keys (knox deletes them on sight too); returns how many."""
    deleted, _ = get_token_model().objects.filter(expiry__lt=timezone.now()).delete()
    return deleted
