"""Audit rows are never updated or deleted by the application; PostgreSQL refuses it too
(audit.models, migration 0003)."""
from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction
from django.db.models import ProtectedError

from agentplatform.tenancy.models import User
from audit import events
from audit.models import AuditEvent, AuditImmutable


@pytest.fixture
def event(requester) -> AuditEvent:
    return events.tool_call_decided(tenant_id=requester.tenant_id, actor_id=requester.pk, decision="EXECUTED",
                                    tool_name="cancel_order", status="OK", message="original")


def _unchanged(event: AuditEvent) -> bool:
    return AuditEvent.objects.filter(pk=event.pk, message="original", decision="EXECUTED").exists()


@pytest.mark.parametrize("attempt", [
    "save", "delete", "queryset_update", "queryset_delete", "bulk_update", "update_or_create",
])
def test_the_model_refuses_every_way_to_change_or_delete_a_row(event, attempt):
    actions = {
        "save": lambda: (setattr(event, "message", "rewritten"), event.save()),
        "delete": event.delete,
        "queryset_update": lambda: AuditEvent.objects.filter(pk=event.pk).update(message="rewritten"),
        "queryset_delete": lambda: AuditEvent.objects.filter(pk=event.pk).delete(),
        "bulk_update": lambda: AuditEvent.objects.bulk_update(
            [AuditEvent(pk=event.pk, message="rewritten")], ["message"]),
        "update_or_create": lambda: AuditEvent.objects.update_or_create(pk=event.pk, defaults={"message": "rewritten"}),
    }

    with pytest.raises(AuditImmutable), transaction.atomic():
        actions[attempt]()

    assert _unchanged(event)


def test_deleting_the_actor_or_tenant_does_not_cascade_into_the_trail(requester):
    temp = User.objects.create(username="acme-temp", tenant=requester.tenant)
    event = events.tool_call_decided(tenant_id=requester.tenant_id, actor_id=temp.pk, decision="DENIED",
                                     message="original")

    with pytest.raises(ProtectedError):
        temp.delete()
    with pytest.raises(ProtectedError):
        requester.tenant.delete()

    assert AuditEvent.objects.filter(pk=event.pk, actor=temp).exists()


@pytest.mark.postgres
@pytest.mark.parametrize("sql", [
    "UPDATE audit_auditevent SET message = 'rewritten' WHERE id = %s",
    "DELETE FROM audit_auditevent WHERE id = %s",
    "UPDATE audit_auditevent SET decision = 'EXECUTED'",
], ids=["update-row", "delete-row", "update-all"])
def test_postgres_refuses_raw_sql_update_and_delete(event, sql):
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(sql, [event.pk] if "%s" in sql else None)

    assert _unchanged(event)


@pytest.mark.postgres
def test_postgres_refuses_an_orm_bypass_of_the_model_guard(event):
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditEvent.objects.filter(pk=event.pk)._raw_delete(using="default")

    assert _unchanged(event)
