"""Writes of the API app: API tokens for programs."""
from __future__ import annotations

from django.db import transaction
from rest_framework.authtoken.models import Token

from agentplatform.errors import PermissionDenied


@transaction.atomic(durable=True)
def api_token_issue(*, user, rotate: bool = False) -> str:
    """Return `user`'s API token for `Authorization: Token <key>`, creating it on first use.

    rotate: delete the existing token first, so the old key stops working at once. Raises
    PermissionDenied for an inactive user. The key is returned to the operator who asked; never
    log it.
    """
    if not user.is_active:
        raise PermissionDenied("an inactive user cannot have an API token")
    if rotate:
        Token.objects.filter(user=user).delete()
    token, _ = Token.objects.get_or_create(user=user)
    return token.key
