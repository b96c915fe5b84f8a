"""An insider with admin rights tries to *impersonate* an approver: set their password, or change
their address and ask for a reset link, then sign in as them and approve. Nobody but the owner sets
the credential of an account that signed in or holds approver or administrator standing
(agentplatform.controlplane.credentials; docs/roles.md, "Trust model")."""
from __future__ import annotations

import re

import pytest
from django.contrib.auth.hashers import make_password
from django.core import mail
from django.test import override_settings
from django.urls import reverse
from guardian.shortcuts import assign_perm

from agentplatform.controlplane.errors import CredentialChangeRefused
from agentplatform.runtime import services as runtime
from agentplatform.tenancy.actor import acting_as
from agentplatform.tenancy.models import User
from approvals.models import Approval
from tools.models import Tool

REFUND_ORDER = "A202607290003"
NEW_PASSWORD = "insider-pass-9876!"


def _password_page(user: User) -> str:
    return reverse("admin:auth_user_password_change", args=[user.pk])


def _change_page(user: User) -> str:
    return reverse("admin:tenancy_user_change", args=[user.pk])


def _change_form(client, user: User, **changes) -> dict:
    """The user change form as the admin renders it, with `changes` applied (a real POST body)."""
    page = client.get(_change_page(user))
    assert page.status_code == 200
    form = page.context["adminform"].form
    data = {}
    for name, field in form.fields.items():
        value = form.initial.get(name, field.initial)
        if name in ("groups", "user_permissions"):
            data[name] = [getattr(v, "pk", v) for v in (value or [])]
        elif isinstance(value, bool):
            if value:
                data[name] = "on"
        elif value is not None and name != "password":
            data[name] = value if not hasattr(value, "isoformat") else value.strftime("%Y-%m-%d %H:%M:%S")
    for name in ("last_login", "date_joined"):
        data.pop(name, None)
    data.update(changes)
    return data


def _pending_refund(requester):
    outcome = runtime.chat_send(user=requester, message=f"refund {REFUND_ORDER} amount 500 because damaged")
    return outcome.pending[0].confirmation_id


def _approver_signed_in_once(client, approver) -> None:
    """The account's owner signed in once (what django.contrib.auth's login records)."""
    from django.contrib.auth.models import update_last_login

    update_last_login(None, approver)


@pytest.mark.parametrize("who", ["acme_admin", "operator"])
def test_an_administrator_cannot_set_an_approvers_password_and_approve_as_them(request, client, who, requester,
                                                                                approver1):
    admin = request.getfixturevalue(who)
    request_id = _pending_refund(requester)
    stored = User.objects.get(pk=approver1.pk).password
    client.force_login(admin)

    response = client.post(_password_page(approver1), {"password1": NEW_PASSWORD, "password2": NEW_PASSWORD,
                                                       "usable_password": "true"})

    assert response.status_code == 302
    assert User.objects.get(pk=approver1.pk).password == stored
    assert "CREDENTIAL_CHANGE_REFUSED" in " ".join(str(m) for m in response.wsgi_request._messages)
    assert not User.objects.get(pk=approver1.pk).check_password(NEW_PASSWORD)
    assert not Approval.objects.filter(request_id=request_id).exists()


def test_an_administrator_cannot_reset_a_signed_in_members_password(client, acme_admin, nobody):
    _approver_signed_in_once(client, nobody)  # no standing, but the account is somebody's now
    client.force_login(acme_admin)
    response = client.post(_password_page(nobody), {"password1": NEW_PASSWORD, "password2": NEW_PASSWORD,
                                                    "usable_password": "true"})
    assert response.status_code == 302
    assert not User.objects.get(pk=nobody.pk).check_password(NEW_PASSWORD)


def test_an_administrator_may_set_the_first_password_of_a_fresh_account(client, acme_admin):
    with acting_as(acme_admin):
        fresh = User.objects.create(username="acme-newcomer", tenant=acme_admin.tenant)
    client.force_login(acme_admin)
    response = client.post(_password_page(fresh), {"password1": NEW_PASSWORD, "password2": NEW_PASSWORD,
                                                   "usable_password": "true"})
    assert response.status_code == 302
    assert User.objects.get(pk=fresh.pk).check_password(NEW_PASSWORD)


def test_locking_an_approver_out_is_allowed(client, acme_admin, approver1):
    # an unusable password takes authority away, it gives nobody a way in
    with acting_as(acme_admin):
        approver1.set_unusable_password()
        approver1.save()
    assert not User.objects.get(pk=approver1.pk).has_usable_password()


@override_settings(EMAIL_BACKEND="django.core.mail.backends.locmem.EmailBackend")
def test_an_administrator_cannot_redirect_an_approvers_reset_link(client, acme_admin, requester, approver1):
    request_id = _pending_refund(requester)
    approver1.email = "approver1@acme.example"
    approver1.save()
    client.force_login(acme_admin)

    response = client.post(_change_page(approver1), _change_form(client, approver1, email="insider@evil.example"))

    assert response.status_code == 302
    assert User.objects.get(pk=approver1.pk).email == "approver1@acme.example"
    client.logout()
    client.post("/accounts/password_reset/", {"email": "insider@evil.example"})
    assert not [m for m in mail.outbox if "insider@evil.example" in m.to]
    assert not Approval.objects.filter(request_id=request_id).exists()


@pytest.mark.parametrize("field", ["password", "email"])
def test_every_path_refuses_another_persons_credential_of_an_approver(acme_admin, approver1, field):
    fresh = User.objects.get(pk=approver1.pk)
    with acting_as(acme_admin), pytest.raises(CredentialChangeRefused):
        if field == "password":
            fresh.set_password(NEW_PASSWORD)
        else:
            fresh.email = "insider@evil.example"
        fresh.save()


def test_a_fresh_account_granted_approve_tool_is_out_of_the_administrators_reach(acme_admin, nobody):
    refund = Tool.objects.get(name="refund_order")
    assign_perm("tools.approve_tool", nobody, refund)  # a shell grant (no person acting)
    fresh = User.objects.get(pk=nobody.pk)
    assert fresh.last_login is None
    with acting_as(acme_admin), pytest.raises(CredentialChangeRefused):
        fresh.set_password(NEW_PASSWORD)
        fresh.save()


def test_the_owner_changes_their_own_password_and_address(client, approver1):
    _approver_signed_in_once(client, approver1)
    with acting_as(approver1):
        approver1.set_password("owner-chose-this-1")
        approver1.email = "me@acme.example"
        approver1.save()
    assert User.objects.get(pk=approver1.pk).check_password("owner-chose-this-1")


@override_settings(EMAIL_BACKEND="django.core.mail.backends.locmem.EmailBackend")
def test_the_reset_link_goes_to_the_owners_stored_address(client, approver1):
    approver1.email = "approver1@acme.example"
    approver1.save()
    client.post("/accounts/password_reset/", {"email": "approver1@acme.example"})
    assert [m.to for m in mail.outbox] == [["approver1@acme.example"]]
    assert re.search(r"/accounts/reset/", mail.outbox[0].body)


def test_a_hash_upgrade_at_sign_in_is_not_a_change(acme_admin, approver1, settings):
    # the owner signs in from a browser where an administrator is signed in, after a hasher upgrade
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher",
                                 "django.contrib.auth.hashers.MD5PasswordHasher"]
    User.objects.filter(pk=approver1.pk).update(password=make_password("owners-pass-1", hasher="md5"))
    fresh = User.objects.get(pk=approver1.pk)
    with acting_as(acme_admin):
        assert fresh.check_password("owners-pass-1")  # re-hashed and saved
    assert User.objects.get(pk=approver1.pk).password.startswith("pbkdf2_")
