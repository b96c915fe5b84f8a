"""Authentication and permission backends that know service accounts (docs/roles.md).

- PersonModelBackend: Django's ModelBackend for people. A service account never signs in with a
  password, and a session that names one is not honoured (`get_user` answers None), so no web
  page, admin page or session-authenticated API call acts as a program's account.
- ServiceAccountAwareObjectPermissionBackend: guardian's backend, except that it never answers
  True for `tools.approve_tool` on a service account, even for a grant that reached the
  database without the control-plane signals (guardian's bulk assign).
"""
from __future__ import annotations

from typing import Any

from django.contrib.auth.backends import ModelBackend
from guardian.backends import ObjectPermissionBackend

from agentplatform.tenancy.service_accounts import APPROVE_CODENAME, APPROVE_PERMISSION, is_service_account


def _is_approve(perm: str) -> bool:
    return perm == APPROVE_PERMISSION or perm == APPROVE_CODENAME


class PersonModelBackend(ModelBackend):
    """ModelBackend that refuses service accounts (no password sign-in, no session) and never
    gives them `tools.approve_tool` as a global permission."""

    def user_can_authenticate(self, user: Any) -> bool:
        return super().user_can_authenticate(user) and not is_service_account(user)

    def has_perm(self, user_obj: Any, perm: str, obj: Any = None) -> bool:
        if _is_approve(perm) and is_service_account(user_obj):
            return False
        return super().has_perm(user_obj, perm, obj)


class ServiceAccountAwareObjectPermissionBackend(ObjectPermissionBackend):
    """guardian's object-permission backend; `tools.approve_tool` is never True for a service account."""

    def has_perm(self, user_obj: Any, perm: str, obj: Any = None) -> bool:
        if _is_approve(perm) and is_service_account(user_obj):
            return False
        return super().has_perm(user_obj, perm, obj)
