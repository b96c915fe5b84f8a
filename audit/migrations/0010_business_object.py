"""The business object of each audit row (audit.subjects), indexed per tenant for the auditor's
search. Older rows get theirs from their own masked arguments; the column is outside the hashed
body (audit.chain.UNHASHED_FIELDS), so no link changes. The append-only trigger is switched off for
that backfill only, inside this migration's transaction, as the chain's own backfill did.
"""
from django.db import migrations, models

BATCH = 2000


def backfill(apps, schema_editor):
    from audit.subjects import business_object_of

    AuditEvent = apps.get_model("audit", "AuditEvent")
    postgres = schema_editor.connection.vendor == "postgresql"
    rows = AuditEvent.objects.exclude(masked_arguments=None).values_list("id", "decision", "masked_arguments")
    if not rows.exists():
        return
    if postgres:
        schema_editor.execute("ALTER TABLE audit_auditevent DISABLE TRIGGER audit_event_append_only", params=None)
    found: dict[str, list] = {}
    for pk, decision, masked in rows.iterator(chunk_size=BATCH):
        subject = business_object_of(decision=decision, masked_arguments=masked)
        if subject:
            found.setdefault(subject, []).append(pk)
    # models.QuerySet.update through the historical model's plain manager (not the refusing one)
    for subject, ids in found.items():
        for start in range(0, len(ids), BATCH):
            models.QuerySet(AuditEvent).filter(pk__in=ids[start:start + BATCH]).update(business_object=subject)
    if postgres:
        schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE", params=None)
        schema_editor.execute("ALTER TABLE audit_auditevent ENABLE TRIGGER audit_event_append_only", params=None)


class Migration(migrations.Migration):

    dependencies = [
        ("audit", "0009_auditevent_policy_rules_auditevent_policy_version"),
    ]

    operations = [
        migrations.AddField(
            model_name="auditevent",
            name="business_object",
            field=models.CharField(blank=True, editable=False, max_length=128,
                                   help_text="The business object the row is about (e.g. an order id)."),
        ),
        migrations.AddIndex(
            model_name="auditevent",
            index=models.Index(fields=["tenant", "business_object", "chain_seq"], name="audit_event_object"),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
