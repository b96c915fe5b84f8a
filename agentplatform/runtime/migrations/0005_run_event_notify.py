"""PostgreSQL: every stored RunEvent sends NOTIFY agentplatform_run_events '<run id>:<seq>' on
commit, which the web processes' stream hubs LISTEN to (issue 12 item 2, agentplatform/api/sse_hub.py).
A trigger rather than code in EventRecorder: every writer (web, worker, recovery) is covered, and a
rolled-back insert notifies nobody. Nothing on SQLite (the streams poll there)."""
from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION agentplatform_notify_run_event() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('agentplatform_run_events', NEW.run_id::text || ':' || NEW.seq::text);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS agentplatform_run_event_notify ON runtime_runevent;
CREATE TRIGGER agentplatform_run_event_notify AFTER INSERT ON runtime_runevent
    FOR EACH ROW EXECUTE FUNCTION agentplatform_notify_run_event();
"""
DROP = """
DROP TRIGGER IF EXISTS agentplatform_run_event_notify ON runtime_runevent;
DROP FUNCTION IF EXISTS agentplatform_notify_run_event();
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("runtime", "0004_model_call_quota")]
    operations = [migrations.RunPython(forwards, backwards)]
