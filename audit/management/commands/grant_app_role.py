"""`python manage.py grant_app_role ROLE`: give the application's database role what it needs and
nothing more (docs/operations.md, "Run the application with a role that owns nothing").

Run it as the tables' owner (the role that ran `migrate`), after every `migrate`: it grants ROLE
SELECT, INSERT, UPDATE and DELETE on every table and USAGE on every sequence of the schema, then
takes back UPDATE, DELETE and TRUNCATE on the audit trail and DELETE and TRUNCATE on its chain
heads, and every write to the retention archive records (the retention role's: docs/operations.md,
"Retention and storage"), so the trail is append-only for the application by privilege, before any trigger runs;
and makes the same row access the default for tables the owner creates later (a new migration).
ROLE cannot disable a trigger (only an owner can), change `session_replication_role` (superuser
only) or drop anything. Idempotent. PostgreSQL only; exits 2 on another database, for an unknown
role, and when ROLE is a superuser or owns a table (it would keep every right it is meant to lack).
"""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction

# The statements of docs/operations.md; {role} is quoted with the database's own quote_ident.
GRANTS = (
    "GRANT USAGE ON SCHEMA {schema} TO {role}",
    "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}",
    "GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {schema} TO {role}",
    "REVOKE UPDATE, DELETE, TRUNCATE ON audit_auditevent FROM {role}",      # the trail: append only
    "REVOKE DELETE, TRUNCATE ON audit_auditchainhead FROM {role}",          # heads move forward only
    # Archive records are the retention role's to write (docs/operations.md, "Retention and
    # storage"): the application could otherwise record a forged archive and so unlock deletion.
    "REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON audit_retentionarchive FROM {role}",
    # Tables and sequences a later migration creates (as this owner) get the same row access at
    # once, so the application does not fail between a migrate and the next run of this command.
    "ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {role}",
    "ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT USAGE, SELECT ON SEQUENCES TO {role}",
)


class Command(BaseCommand):
    help = "Grant the application's database role row access, with the audit trail append-only (PostgreSQL)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("role", help="the role the web processes and workers connect as (e.g. ap_app)")
        parser.add_argument("--schema", default="public")

    def handle(self, *args, role: str, schema: str, **options) -> None:
        if connection.vendor != "postgresql":
            raise CommandError("grant_app_role is for PostgreSQL (DATABASE_URL=postgres://...)", returncode=2)
        with connection.cursor() as cursor:
            cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = %s", [role])
            found = cursor.fetchone()
            if found is None:
                raise CommandError(f"no database role {role!r}: create it first (CREATE ROLE {role} LOGIN ...)",
                                   returncode=2)
            if found[0]:
                raise CommandError(f"{role!r} is a superuser: it could bypass the trail's triggers", returncode=2)
            cursor.execute("SELECT count(*) FROM pg_tables WHERE schemaname = %s AND tableowner = %s", [schema, role])
            if cursor.fetchone()[0]:
                raise CommandError(f"{role!r} owns tables in {schema!r}: an owner can disable the trail's "
                                   f"triggers; run the application as a role that owns nothing", returncode=2)
            cursor.execute("SELECT quote_ident(%s), quote_ident(%s)", [role, schema])
            quoted_role, quoted_schema = cursor.fetchone()
            with transaction.atomic():
                for statement in GRANTS:
                    cursor.execute(statement.format(role=quoted_role, schema=quoted_schema))
        self.stdout.write(f"granted {role}: rows of every table in {schema}; audit trail append-only")
