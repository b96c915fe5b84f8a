"""The hash chain of the audit trail: each AuditEvent is chained to the previous event of its tenant.

Why: the application's database role (or whoever owns the tables) can disable triggers, edit,
delete or reorder rows. The chain does not prevent that; it makes it *visible*: `python manage.py
audit_verify` recomputes every link and names the first row that no longer fits.

The link of one event (all hex SHA-256, UTF-8):

    body  = SHA-256(canonical JSON of the row)                     (computed in Python, `body_digest`)
    hash  = SHA-256(prev_hash + ":" + chain_seq + ":" + body)      (`link_hash`)

`chain_seq` counts the tenant's events from 1 without gaps; `prev_hash` is the `row_hash` of the
tenant's event with `chain_seq - 1` ("" for the first). Canonical JSON: every concrete column of
the row except the three chain columns and `business_object`, by attribute name (`tenant_id`, `actor_id`, ...), values
converted by the field's own `to_python`, datetimes as UTC ISO 8601 with microseconds, UUIDs as
lower-case text, integral floats as integers (jsonb returns 1e16 as an integer), keys sorted, no
spaces, non-ASCII kept. Columns whose value is NULL or "" are left out, so a column added later
(nullable or blank by default) leaves the links of older rows valid.

Concurrency: the tenant's head row (`AuditChainHead`) is advanced with one upsert that locks it
until the inserting transaction ends, so two transactions can never take the same `chain_seq` or
link to the same predecessor; if a transaction rolls back, its head advance rolls back with its
event. On PostgreSQL the advance and the event INSERT are one statement (a data-modifying CTE;
the link is computed by the SQL function `audit_chain_link`, migration 0004); on SQLite they are
two statements in one transaction (the link function is registered on each connection).

When the head is locked: every writer goes through `append_chained`. Inside a transaction on
PostgreSQL the row's statement is built (and its body hashed) at once, but sent as the
transaction's last statement, right before its COMMIT and in one round trip with it
(core.sql.precommit.before_commit, kept by agentplatform.pgbackend, which sends them in psycopg's
pipeline mode): the tenant's head is locked for that statement and the COMMIT, not from
the audit write through the rest of the transaction (a step's messages, events and run state).
The row still commits with the business change or not at all: a rolled-back savepoint drops the
rows appended inside it, a rollback drops them all, and a row the database refuses fails the
COMMIT, so nothing of the transaction commits (fail closed). A transaction's rows are chained in
the order they were appended, one statement each; the chain's order is the order of the COMMITs,
so `occurred_at` (when the decision was made) may run slightly out of `chain_seq` order between
concurrent transactions. Until its COMMIT a transaction's own audit rows are not in the table
(not even for itself). Outside a transaction the row is one autocommitted statement. SQLite writes
at once: its transactions hold the database's one write lock from their BEGIN (IMMEDIATE), so a
later send would shorten no wait. With Django's own PostgreSQL backend (DB_RELEASE_SAVEPOINTS=true)
rows are written at once as well, and the head stays locked from the audit write to the COMMIT.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import uuid
from contextlib import nullcontext
from typing import Any, Callable

from django.apps import apps
from django.db import connection, transaction

from core.sql.precommit import before_commit
from core.sql.values import column_values

CHAIN_FIELDS = ("chain_seq", "prev_hash", "row_hash")
# Columns outside the hashed body: the chain's own, and `business_object` (audit.subjects), a search
# aid derived from the hashed masked_arguments, so filling it for older rows changes no link.
UNHASHED_FIELDS = CHAIN_FIELDS + ("business_object",)
_SQL_CACHE: dict[tuple, str] = {}


def _event_model():
    """The AuditEvent model, from Django's app registry: `audit.models` writes its rows through this
    module (AuditEvent.save), so this module does not import it back."""
    return apps.get_model("audit", "AuditEvent")


def _plain(value: Any) -> Any:
    """A JSON-ready, representation-stable form of one value (see the module docstring)."""
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(datetime.timezone.utc)
        return value.isoformat(timespec="microseconds")
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def canonical_json(values: dict[str, Any]) -> str:
    """The canonical JSON text of one audit row.

    values: attribute name (`tenant_id`, `occurred_at`, ...) -> Python value, as stored or about to
    be stored; chain columns are ignored. Returns compact, key-sorted JSON text. Raises ValueError
    for NaN/infinite floats (PostgreSQL could not store them either).
    """
    body: dict[str, Any] = {}
    for field in _event_model()._meta.concrete_fields:
        if field.attname in UNHASHED_FIELDS or field.attname not in values:
            continue
        value = values[field.attname]
        if value is None or value == "":
            continue
        if field.get_internal_type() != "JSONField":
            value = field.to_python(value)
        body[field.attname] = _plain(value)
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def body_digest(values: dict[str, Any]) -> str:
    """Hex SHA-256 of `canonical_json(values)`."""
    return hashlib.sha256(canonical_json(values).encode("utf-8")).hexdigest()


def link_hash(prev_hash: str, seq: int, body: str) -> str:
    """Hex SHA-256 of `prev_hash:seq:body` (the SQL function `audit_chain_link` computes the same)."""
    return hashlib.sha256(f"{prev_hash}:{seq}:{body}".encode("utf-8")).hexdigest()


def register_sqlite_functions(sender, connection, **kwargs) -> None:
    """`connection_created` receiver: give SQLite the `audit_chain_link(prev, seq, body)` function
    PostgreSQL gets from migration 0004."""
    if connection.vendor == "sqlite":
        connection.connection.create_function("audit_chain_link", 3, link_hash, deterministic=True)


def _head_upsert_sql() -> str:
    # The first event of a tenant creates its head (seq 1, no predecessor); every later one moves
    # it forward under the head row's lock (ON CONFLICT DO UPDATE locks the row until commit and
    # re-reads its newest committed version under READ COMMITTED).
    return ("INSERT INTO audit_auditchainhead (tenant_id, seq, prev_hash, hash) "
            "VALUES (%s, 1, '', audit_chain_link('', 1, %s)) "
            "ON CONFLICT (tenant_id) DO UPDATE SET seq = audit_auditchainhead.seq + 1, "
            "prev_hash = audit_auditchainhead.hash, "
            "hash = audit_chain_link(audit_auditchainhead.hash, audit_auditchainhead.seq + 1, %s) "
            "RETURNING seq, prev_hash, hash")


def _prepared(values: dict[str, Any]) -> tuple[str, list, int, str]:
    """The chained INSERT of one row, built before any lock is taken: (sql, params, tenant id,
    body digest). Raises ValueError for a value the canonical form refuses (NaN, infinity)."""
    AuditEvent = _event_model()
    body = body_digest(values)
    columns, params = column_values(AuditEvent, {k: v for k, v in values.items() if k not in CHAIN_FIELDS},
                                     adding=True)
    kept = [(c, p) for c, p in zip(columns, params) if c not in CHAIN_FIELDS]
    columns, params = [c for c, _ in kept], [p for _, p in kept]
    quote = connection.ops.quote_name
    key = (tuple(columns), connection.vendor)
    sql = _SQL_CACHE.get(key)
    if sql is None:
        target = ", ".join(map(quote, columns + list(CHAIN_FIELDS)))
        if connection.vendor == "postgresql":
            sql = (f"WITH head AS ({_head_upsert_sql()}) INSERT INTO {quote(AuditEvent._meta.db_table)} ({target}) "
                   f"SELECT {', '.join(['%s'] * len(columns))}, head.seq, head.prev_hash, head.hash FROM head "
                   f"RETURNING chain_seq, prev_hash, row_hash")
        else:
            sql = (f"INSERT INTO {quote(AuditEvent._meta.db_table)} ({target}) "
                   f"VALUES ({', '.join(['%s'] * (len(columns) + 3))})")
        _SQL_CACHE[key] = sql
    return sql, params, values["tenant_id"], body


def _send(sql: str, params: list, tenant_id: int, body: str) -> tuple[int, str, str]:
    """Advance the tenant's head and INSERT the row, in the transaction open now (or autocommit on
    PostgreSQL, where it is one statement); returns (seq, prev, hash)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(sql, [tenant_id, body, body, *params])
            return tuple(cursor.fetchone())
        cursor.execute(_head_upsert_sql(), [tenant_id, body, body])
        seq, prev, link = cursor.fetchone()
        cursor.execute(sql, [*params, seq, prev, link])
    return seq, prev, link


def insert_chained(values: dict[str, Any]) -> tuple[int, str, str]:
    """INSERT one AuditEvent row chained to its tenant's previous event now; returns (seq, prev, hash).

    values: attribute name -> Python value for every concrete column but the chain columns
    (`audit.events._write` builds them; `tenant_id` is required). The row and the head advance
    commit or roll back together; outside a transaction they are made one. Inside a transaction
    the tenant's head stays locked from here to its end: writers use `append_chained`, which sends
    the row right before the COMMIT. Raises DatabaseError (IntegrityError, ...) when the write
    fails, ValueError for a value the canonical form refuses: the caller fails closed.
    """
    prepared = _prepared(values)
    if connection.vendor == "postgresql":
        return _send(*prepared)
    # Two statements: one transaction (the caller's, without a savepoint, or one of their own).
    with nullcontext() if connection.in_atomic_block else transaction.atomic():
        return _send(*prepared)


def append_chained(values: dict[str, Any], *,
                   stored: Callable[[tuple[int, str, str]], None] | None = None) -> bool:
    """Append one AuditEvent row to its tenant's chain as the last statement of the transaction
    open now (right before its COMMIT: core.sql.precommit.before_commit), or at once outside one.

    values: as `insert_chained`. stored: called with (seq, prev, hash) once the row is written.
    The row commits or rolls back with the transaction (a savepoint rolled back drops it, as it
    would have dropped the row); a failure to write it fails the COMMIT, so nothing of the
    transaction commits (fail closed). The body is hashed and the statement built now, so the
    head's lock covers one statement and the COMMIT. The rows of one transaction are chained in
    the order they were appended. Returns True when deferred to the COMMIT, False when written.
    Raises ValueError now for a value the canonical form refuses; DatabaseError from the write
    (at once, or from the atomic block's exit when deferred).
    """
    prepared = _prepared(values)
    if connection.vendor != "postgresql":
        # SQLite: a transaction holds the database's one write lock from its BEGIN (IMMEDIATE), so
        # sending the row later would shorten no wait; its two statements share one transaction.
        with nullcontext() if connection.in_atomic_block else transaction.atomic():
            result = _send(*prepared)
        if stored is not None:
            stored(result)
        return False
    sql, params, tenant_id, body = prepared

    def send() -> Callable[[], None]:
        # Sent now; its RETURNING is read once the backend has sent the COMMIT along with it.
        cursor = connection.cursor()
        cursor.execute(sql, [tenant_id, body, body, *params])

        def read() -> None:
            with cursor:
                result = tuple(cursor.fetchone())
            if stored is not None:
                stored(result)
        return read

    return before_commit(send)  # deferred, or sent now (autocommit: one statement)


def online_chain_start(tenant_id: int) -> tuple[int, str]:
    """Where the online part of a tenant's chain starts: (chain_seq of its first row, the row_hash
    that row must link to). (1, "") while nothing was archived; after a retention cut, the newest
    AUDIT archive's (last_seq + 1, last_hash) (audit.models.RetentionArchive). Rows at or below
    that archive's last_seq that are still in the table are archived ones awaiting deletion: the
    archive file holds and verifies them (`python -m audit.verify_export`). One SELECT."""
    archive = (apps.get_model("audit", "RetentionArchive").objects
               .filter(tenant_id=tenant_id, kind="AUDIT", last_seq__isnull=False)
               .order_by("-last_seq").values_list("last_seq", "last_hash").first())
    return (1, "") if archive is None else (archive[0] + 1, archive[1])
