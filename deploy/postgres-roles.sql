-- Run once by the postgres image on a new data directory (docker-entrypoint-initdb.d), as the
-- superuser: the two roles of docs/operations.md, "Run the application with a role that owns
-- nothing". ap_owner runs `migrate` and owns every table; ap_app is what web, worker and beat
-- connect as: rows only, and the audit trail append-only (`manage.py grant_app_role ap_app`,
-- which the compose `migrate` service runs after each migration). Compose-only passwords.
CREATE ROLE ap_owner LOGIN PASSWORD 'ap_owner';
CREATE ROLE ap_app LOGIN PASSWORD 'ap_app';
ALTER DATABASE agentplatform OWNER TO ap_owner;
\connect agentplatform
ALTER SCHEMA public OWNER TO ap_owner;
