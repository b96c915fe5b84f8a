"""API keys: django-rest-knox digests only, shown once, expiry, name, last use,
revocation by the owner and their tenant administrator (another tenant: 404), audited, and the
migration of DRF's clear-text tokens."""
from __future__ import annotations

import datetime
import importlib
import json
from types import SimpleNamespace

from django.apps import apps as django_apps
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from agentplatform.api.models import ApiKey
from agentplatform.tenancy.credentials import api_key_issue
from agentplatform.tenancy.models import User
from audit.models import AuditEvent
from tests.api.conftest import assert_error


def _with_key(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
    return client


def _session(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_a_key_is_shown_once_and_only_its_digest_is_stored(requester):
    response = _session(requester).post("/api/v1/api-keys/", {"name": "ci", "expires_in_days": 7}, format="json")

    assert response.status_code == 201 and response["Cache-Control"] == "no-store"
    body = response.json()
    raw = body["key"]
    assert raw.startswith("ap_") and body["name"] == "ci" and body["prefix"] == raw[:15]
    stored = ApiKey.objects.get(public_id=body["id"])
    assert raw not in json.dumps(list(ApiKey.objects.values()), default=str)
    assert len(stored.digest) == 128 and stored.expiry - timezone.now() > datetime.timedelta(days=6, hours=23)
    listed = _session(requester).get("/api/v1/api-keys/").json()["results"]
    assert [k["name"] for k in listed] == ["ci"] and "key" not in listed[0]
    assert _with_key(raw).get("/api/v1/tools/").status_code == 200
    audit = AuditEvent.objects.get(decision="CONTROL_CHANGE", masked_arguments__object__type="api_token")
    assert audit.status == "CREATED" and raw not in json.dumps(audit.masked_arguments)


def test_last_used_is_recorded_at_most_once_a_minute(requester, settings):
    key, raw = api_key_issue(user=requester, name="poller")
    assert key.last_used_at is None
    client = _with_key(raw)

    client.get("/api/v1/tools/")
    first = ApiKey.objects.get(pk=key.pk).last_used_at
    client.get("/api/v1/tools/")

    assert first is not None and ApiKey.objects.get(pk=key.pk).last_used_at == first
    settings.API_KEY_LAST_USED_RESOLUTION_SECONDS = 0
    client.get("/api/v1/tools/")
    assert ApiKey.objects.get(pk=key.pk).last_used_at > first


def test_an_expired_key_is_refused(requester):
    key, raw = api_key_issue(user=requester, name="short", expires_in_days=1)
    ApiKey.objects.filter(pk=key.pk).update(expiry=timezone.now() - datetime.timedelta(seconds=1))

    assert_error(_with_key(raw).get("/api/v1/tools/"), 401, "AUTHENTICATION_FAILED")


def test_keys_without_expiry_need_a_setting(requester, settings):
    assert_error(_session(requester).post("/api/v1/api-keys/", {"name": "forever", "expires_in_days": 0},
                                          format="json"), 400, "INVALID_ARGUMENTS")
    settings.API_KEY_ALLOW_NO_EXPIRY = True
    response = _session(requester).post("/api/v1/api-keys/", {"name": "forever", "expires_in_days": 0}, format="json")
    assert response.status_code == 201 and response.json()["expires_at"] is None


def test_the_owner_revokes_a_key(requester):
    key, raw = api_key_issue(user=requester, name="laptop")

    assert _session(requester).delete(f"/api/v1/api-keys/{key.public_id}/").status_code == 204

    assert_error(_with_key(raw).get("/api/v1/tools/"), 401, "AUTHENTICATION_FAILED")
    assert AuditEvent.objects.filter(decision="CONTROL_CHANGE", status="DELETED", actor=requester).exists()


def test_the_tenant_administrator_revokes_a_member_key_but_not_another_tenants(requester, acme_admin, outsider):
    acme_admin.is_staff, acme_admin.is_superuser = True, False
    acme_admin.save()
    mine, raw = api_key_issue(user=requester, name="member key")
    theirs, their_raw = api_key_issue(user=outsider, name="globex key")

    listed = _session(acme_admin).get("/api/v1/api-keys/?scope=tenant").json()["results"]
    assert [k["name"] for k in listed] == ["member key"]
    assert_error(_session(acme_admin).delete(f"/api/v1/api-keys/{theirs.public_id}/"), 404, "NOT_FOUND")
    assert_error(_session(outsider).delete(f"/api/v1/api-keys/{mine.public_id}/"), 404, "NOT_FOUND")
    assert_error(_session(requester).post("/api/v1/api-keys/", {"name": "x", "user": outsider.username},
                                          format="json"), 404, "NOT_FOUND")
    assert _session(acme_admin).delete(f"/api/v1/api-keys/{mine.public_id}/").status_code == 204

    assert_error(_with_key(raw).get("/api/v1/tools/"), 401, "AUTHENTICATION_FAILED")
    assert _with_key(their_raw).get("/api/v1/tools/").status_code == 200


def test_a_member_cannot_issue_keys_for_another_member(requester, approver1):
    response = _session(requester).post("/api/v1/api-keys/", {"name": "x", "user": approver1.username}, format="json")
    assert_error(response, 403, "KEY_FOR_ANOTHER_PERSON")
    assert not ApiKey.objects.exists()


def test_drf_clear_text_tokens_are_migrated_to_digests(requester):
    migration = importlib.import_module("agentplatform.api.migrations.0002_api_keys")
    old = "9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b"
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY, user_id bigint, created timestamp)")
        cursor.execute("INSERT INTO authtoken_token VALUES (%s, %s, %s)", [old, requester.pk, timezone.now()])

    migration.migrate_drf_tokens(django_apps, SimpleNamespace(connection=connection))  # it only reads .connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM authtoken_token")
        assert cursor.fetchone()[0] == 0
    assert ApiKey.objects.get(user=requester).name == "migrated DRF token"
    assert _with_key(old).get("/api/v1/tools/").status_code == 200


# -- credentials belong to their owner (docs/operations.md, "API keys") ----------------------------

def _admin_form_add(client, username: str):
    from tests.controlplane.conftest import admin_url

    return client.post(admin_url(User, "add"), {"username": username, "password1": "x-Very-long-pass-91",
                                                "password2": "x-Very-long-pass-91", "usable_password": "true"})


def test_the_sock_puppet_story_fails_where_the_admin_asks_for_the_members_keys(client, acme_admin, approver1):
    """An administrator alone creates two members and tries to obtain their keys (and a real
    approver's) through every path: the API's `user`, the users' admin action. Each is refused,
    nothing is created, and each refusal is in the trail."""
    from tests.controlplane.conftest import admin_url

    # given: acme-admin creates sock1 and sock2 in the admin
    client.force_login(acme_admin)
    for name in ("sock1", "sock2"):
        assert _admin_form_add(client, name).status_code == 302
    socks = list(User.objects.filter(username__in=["sock1", "sock2"]).order_by("username"))
    assert [s.tenant_id for s in socks] == [acme_admin.tenant_id] * 2
    admin_api = _session(acme_admin)

    # when / then: the API refuses a key for each of them, and for the real approver
    for target in (*socks, approver1):
        response = admin_api.post("/api/v1/api-keys/", {"name": "k", "user": target.username}, format="json")
        assert_error(response, 403, "KEY_FOR_ANOTHER_PERSON")
        assert "key" not in response.json()
    # the users' admin action refuses people too, and shows no key
    response = client.post(admin_url(User, "changelist"), {
        "action": "issue_service_account_key", "_selected_action": [s.pk for s in socks] + [approver1.pk]},
        follow=True)
    assert 'data-testid="api-token"' not in response.content.decode()
    assert not ApiKey.objects.filter(user__in=[*socks, approver1]).exists()
    refusals = AuditEvent.objects.filter(decision="REFUSED", status="KEY_FOR_ANOTHER_PERSON", actor=acme_admin)
    assert refusals.count() == 6  # three through the API, three through the admin


def test_an_operator_lists_and_revokes_but_never_receives_a_persons_key(operator, requester):
    key, raw = api_key_issue(user=requester, name="laptop")
    response = _session(operator).post("/api/v1/api-keys/", {"name": "k", "user": requester.username}, format="json")
    assert_error(response, 403, "KEY_FOR_ANOTHER_PERSON")
    assert list(ApiKey.objects.filter(user=requester)) == [key]
    assert _session(operator).delete(f"/api/v1/api-keys/{key.public_id}/").status_code == 204
    assert_error(_with_key(raw).get("/api/v1/tools/"), 401, "AUTHENTICATION_FAILED")


def test_a_service_accounts_key_goes_to_its_tenant_administrator_or_an_operator(people, acme_admin, operator,
                                                                             requester, globex_admin):
    integration = people["acme"]["integration"]
    response = _session(acme_admin).post("/api/v1/api-keys/", {"name": "erp", "user": integration.username},
                                         format="json")
    assert response.status_code == 201 and response.json()["owner"] == integration.username
    assert _with_key(response.json()["key"]).get("/api/v1/tools/").status_code == 200
    created = AuditEvent.objects.get(decision="CONTROL_CHANGE", status="CREATED",
                                     masked_arguments__object__type="api_token")
    assert created.actor_id == acme_admin.pk and response.json()["key"] not in json.dumps(created.masked_arguments)
    by_operator = _session(operator).post("/api/v1/api-keys/", {"name": "erp2", "user": integration.username},
                                          format="json")
    assert by_operator.status_code == 201
    # a member may not; another tenant's administrator does not even see it
    assert_error(_session(requester).post("/api/v1/api-keys/", {"name": "x", "user": integration.username},
                                          format="json"), 403, "PERMISSION_DENIED")
    assert_error(_session(globex_admin).post("/api/v1/api-keys/", {"name": "x", "user": integration.username},
                                             format="json"), 404, "NOT_FOUND")
    assert ApiKey.objects.filter(user=integration).count() == 2


def test_a_post_with_an_idempotency_key_never_replays_a_secret(requester):
    from agentplatform.api.models import HttpIdempotencyKey

    client = _session(requester)
    first = client.post("/api/v1/api-keys/", {"name": "ci"}, format="json", HTTP_IDEMPOTENCY_KEY="same")
    second = client.post("/api/v1/api-keys/", {"name": "ci"}, format="json", HTTP_IDEMPOTENCY_KEY="same")
    assert first.status_code == second.status_code == 201 and "Idempotent-Replayed" not in second
    assert first.json()["key"] != second.json()["key"]
    assert not HttpIdempotencyKey.objects.exists()  # no stored response could hold a key


def test_the_shell_command_prints_the_key_only_to_its_output_and_is_audited(requester, caplog):
    import io
    import logging

    from django.core.management import call_command

    out = io.StringIO()
    with caplog.at_level(logging.DEBUG):
        call_command("issue_api_token", "--user", requester.username, "--rotate", stdout=out)
    raw = out.getvalue().strip()
    assert _with_key(raw).get("/api/v1/tools/").status_code == 200
    assert raw not in caplog.text
    row = AuditEvent.objects.get(decision="CONTROL_CHANGE", status="CREATED",
                                 masked_arguments__object__type="api_token")
    assert row.masked_arguments["actor_role"] == "shell (manage.py issue_api_token)" and row.actor_id is None
    assert raw not in json.dumps(row.masked_arguments) + row.message


def test_the_admins_key_pages_list_and_revoke_but_add_nothing_and_show_no_secret(client, acme_admin, requester):
    from tests.controlplane.conftest import admin_url

    key, raw = api_key_issue(user=requester, name="laptop")
    client.force_login(acme_admin)
    listed = client.get(admin_url(ApiKey, "changelist")).content.decode()
    shown = client.get(admin_url(ApiKey, "change", key.pk)).content.decode()
    assert "laptop" in listed and key.token_key in shown
    assert raw not in listed + shown and raw[15:] not in listed + shown
    assert client.get(admin_url(ApiKey, "add")).status_code == 403
