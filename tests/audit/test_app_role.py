"""The application's database role (docs/operations.md, `manage.py grant_app_role`): on a
database migrated by its owner, the role the web processes and workers use can read and write
rows, append to the audit trail, and do nothing that empties or rewrites it: no UPDATE, DELETE or
TRUNCATE of the trail, no DELETE of a chain head, no trigger disabled, no
`session_replication_role` (the owner's and the superuser's ways around the triggers). The compose
deployment connects as such a role (compose.yaml, deploy/postgres-roles.sql)."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import errors

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.postgres


def _url(base: str, *, user: str, database: str) -> str:
    parts = urlsplit(base)
    host = parts.hostname + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, f"{user}@{host}", f"/{database}", "", ""))


def _manage(url: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DATABASE_URL": url, "LLM_API_KEY": ""}
    env.pop("CELERY_BROKER_URL", None)
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def roles():
    """A database owned by a fresh owner role, migrated by it and seeded, and a fresh application
    role granted by `grant_app_role`; dropped after."""
    base = os.environ["DATABASE_URL"]
    tag = uuid.uuid4().hex[:8]
    owner, app, database = f"ap_owner_{tag}", f"ap_app_{tag}", f"ap_roles_{tag}"
    admin = psycopg.connect(_url(base, user=urlsplit(base).username or "postgres", database="postgres"),
                            autocommit=True)
    admin.execute(f"CREATE ROLE {owner} LOGIN")
    admin.execute(f"CREATE ROLE {app} LOGIN")
    admin.execute(f"CREATE DATABASE {database} OWNER {owner}")
    with psycopg.connect(_url(base, user=urlsplit(base).username or "postgres", database=database),
                         autocommit=True) as db:
        db.execute(f"ALTER SCHEMA public OWNER TO {owner}")
    try:
        owner_url, app_url = _url(base, user=owner, database=database), _url(base, user=app, database=database)
        migrated = _manage(owner_url, "migrate", "--noinput")
        assert migrated.returncode == 0, migrated.stderr[-3000:]
        yield {"owner_url": owner_url, "app_url": app_url, "app": app, "owner": owner}
    finally:
        admin.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
        admin.execute(f"DROP ROLE IF EXISTS {app}")
        admin.execute(f"DROP ROLE IF EXISTS {owner}")
        admin.close()


def test_the_app_role_writes_rows_and_appends_to_the_trail_but_cannot_empty_it(roles):
    granted = _manage(roles["owner_url"], "grant_app_role", roles["app"])
    assert granted.returncode == 0, granted.stderr
    again = _manage(roles["owner_url"], "grant_app_role", roles["app"])  # after a later migrate: idempotent
    assert again.returncode == 0, again.stderr

    # the application, as the role: seeding writes tools, users, grants and audit rows
    seeded = _manage(roles["app_url"], "seed_demo")
    assert seeded.returncode == 0, seeded.stderr[-3000:]
    verified = _manage(roles["app_url"], "audit_verify")
    assert verified.returncode == 0 and "OK acme" in verified.stdout, verified.stdout + verified.stderr

    refused = {
        "DELETE FROM audit_auditevent": errors.InsufficientPrivilege,
        "UPDATE audit_auditevent SET message = 'x'": errors.InsufficientPrivilege,
        "TRUNCATE audit_auditevent": errors.InsufficientPrivilege,
        "DELETE FROM audit_auditchainhead": errors.InsufficientPrivilege,
        "TRUNCATE audit_auditchainhead": errors.InsufficientPrivilege,
        # archive records are the retention role's (a forged one would unlock deletion of the trail)
        "INSERT INTO audit_retentionarchive (tenant_id, kind, path, sha256, rows, created_at, prev_hash, last_hash) "
        "VALUES (1, 'AUDIT', 'x', 'x', 1, now(), '', '')": errors.InsufficientPrivilege,
        "ALTER TABLE audit_auditevent DISABLE TRIGGER ALL": errors.InsufficientPrivilege,
        "SET session_replication_role = replica": errors.InsufficientPrivilege,
        "DROP TABLE audit_auditevent": errors.InsufficientPrivilege,
    }
    with psycopg.connect(roles["app_url"], autocommit=True) as app:
        before = app.execute("SELECT count(*) FROM audit_auditevent").fetchone()[0]
        assert before > 0
        for statement, error in refused.items():
            with pytest.raises(error):
                app.execute(statement)
        # rows of the other tables are the application's to write
        assert app.execute("UPDATE catalog_order SET updated_at = updated_at").rowcount > 0
        assert app.execute("SELECT count(*) FROM audit_auditevent").fetchone()[0] == before
    # a table a later migration adds (created by the owner) is writable at once
    with psycopg.connect(roles["owner_url"], autocommit=True) as owner:
        owner.execute("CREATE TABLE later_feature (id bigserial PRIMARY KEY, note text)")
    with psycopg.connect(roles["app_url"], autocommit=True) as app:
        app.execute("INSERT INTO later_feature (note) VALUES ('x')")
        assert app.execute("SELECT count(*) FROM later_feature").fetchone()[0] == 1


def test_grant_app_role_refuses_a_role_that_owns_the_tables_or_does_not_exist(roles):
    owns = _manage(roles["owner_url"], "grant_app_role", roles["owner"])
    unknown = _manage(roles["owner_url"], "grant_app_role", "no_such_role_x")

    assert owns.returncode == 2 and "owns tables" in owns.stderr
    assert unknown.returncode == 2 and "no database role" in unknown.stderr


def test_only_the_retention_role_records_archives_and_deletes_archived_rows(roles):
    """The retention role of docs/operations.md ("Retention and storage"), granted as documented:
    it records an archive and then deletes exactly the rows it covers; the application's role can
    do neither, and the retention role cannot delete a row no archive covers."""
    assert _manage(roles["owner_url"], "grant_app_role", roles["app"]).returncode == 0
    assert _manage(roles["app_url"], "seed_demo").returncode == 0
    retention = f"ap_retention_{uuid.uuid4().hex[:8]}"
    base = os.environ["DATABASE_URL"]
    admin = psycopg.connect(_url(base, user=urlsplit(base).username or "postgres", database="postgres"), autocommit=True)
    admin.execute(f"CREATE ROLE {retention} LOGIN")
    try:
        with psycopg.connect(roles["owner_url"], autocommit=True) as owner:
            for statement in (f"GRANT USAGE ON SCHEMA public TO {retention}",
                              f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {retention}",
                              f"GRANT DELETE ON audit_auditevent TO {retention}",
                              f"GRANT INSERT ON audit_retentionarchive TO {retention}",
                              f"GRANT USAGE ON SEQUENCE audit_retentionarchive_id_seq TO {retention}"):
                owner.execute(statement)
            tenant_id, last_hash = owner.execute(
                "SELECT tenant_id, row_hash FROM audit_auditevent WHERE chain_seq = 2 ORDER BY tenant_id LIMIT 1").fetchone()
        record = ("INSERT INTO audit_retentionarchive (tenant_id, kind, first_seq, last_seq, prev_hash, last_hash, path, "
                  "sha256, rows, created_at) VALUES (%s, 'AUDIT', 1, 2, '', %s, 'x', 'x', 2, now())")
        delete = "DELETE FROM audit_auditevent WHERE tenant_id = %s AND chain_seq <= %s"
        with psycopg.connect(roles["app_url"]) as app:
            with pytest.raises(errors.InsufficientPrivilege):
                app.execute(record, [tenant_id, last_hash])
            app.rollback()
        with psycopg.connect(roles["app_url"]) as app:
            app.execute("SET LOCAL agentplatform.retention = 'on'")
            with pytest.raises(errors.InsufficientPrivilege):
                app.execute(delete, [tenant_id, 2])
            app.rollback()

        retention_url = _url(base, user=retention, database=urlsplit(roles["owner_url"]).path.lstrip("/"))
        with psycopg.connect(retention_url) as role:
            role.execute(record, [tenant_id, last_hash])
        with psycopg.connect(retention_url) as role:
            role.execute("SET LOCAL agentplatform.retention = 'on'")
            with pytest.raises(errors.InsufficientPrivilege, match="append-only"):
                role.execute(delete, [tenant_id, 3])  # row 3 is in no archive
            role.rollback()
        with psycopg.connect(retention_url) as role:
            role.execute("SET LOCAL agentplatform.retention = 'on'")
            assert role.execute(delete, [tenant_id, 2]).rowcount == 2
        verified = _manage(roles["app_url"], "audit_verify")
        assert verified.returncode == 0, verified.stdout + verified.stderr
    finally:
        with psycopg.connect(roles["owner_url"], autocommit=True) as owner:
            owner.execute(f"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {retention}")
            owner.execute(f"REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM {retention}")
            owner.execute(f"REVOKE ALL ON SCHEMA public FROM {retention}")
        admin.execute(f"DROP ROLE IF EXISTS {retention}")
        admin.close()
