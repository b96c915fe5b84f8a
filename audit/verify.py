"""Verifying a tenant's audit hash chain (audit.chain) fast, from any start point.

`verify_chain(tenant, start=..., limit=...)` recomputes the links of the tenant's rows after
`start` and names the first fault, with the same faults and the same words as
`audit.chain.verify_tenant` (the reference, which reads through the ORM and checks from row 1).

Why a second implementation: the reference spends ~0.1 ms a row in the ORM (`.values()` and a
`field.to_python` per column per row), 18 minutes at 10M rows. Here, on PostgreSQL, one read-only
REPEATABLE READ transaction streams the rows through a server-side cursor in `chain_seq` order
(served by the `audit_event_chain_position` index), each column is converted by a function chosen
once per run, and the canonical JSON is encoded by one shared encoder: the same text, byte for
byte, as `audit.chain.canonical_json` (tests/audit/test_incremental_verify.py compares the two on
every kind of column). The head and the rows are read in that one snapshot, so rows appended
while the run reads do not look like a head ahead of the chain. SQLite takes the ORM path of the
reference, from the same start point.

The start point (`ChainStart`: the last chain_seq before the first row to check, and that row's
hash) is what incremental verification (audit.verify_checkpoint) and the archive cut of retention
plug in: the first row checked must carry `start.prev_hash` as its prev_hash.
"""
from __future__ import annotations

import datetime
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from django.apps import apps
from django.db import connection, transaction

from audit.chain import UNHASHED_FIELDS, body_digest, link_hash

FETCH_ROWS = 5000  # rows per FETCH of the server-side cursor: one round trip each
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


@dataclass(frozen=True)
class ChainStart:
    """Where a verification starts: `seq`, the last chain position before the first row to check
    (0: from the tenant's first row), and `prev_hash`, the row_hash of that position ("" at 0).
    The first row checked must be `seq + 1` and link to `prev_hash`."""

    seq: int = 0
    prev_hash: str = ""


FROM_THE_FIRST_ROW = ChainStart()


@dataclass(frozen=True)
class ChainVerdict:
    """The result of verifying one tenant's chain from a start point.

    ok: no fault among the rows checked (and, when `complete`, the head matches the last row).
    rows: rows checked. head_seq / head_hash: the tenant's head (what to anchor outside the
    database). start_seq: the start point's seq. last_seq / last_hash: the last row that verified
    (the start point when none did): a checkpoint may be set there when ok. complete: the run
    reached the end of the chain (False when `limit` stopped it first). problem: the first fault,
    naming the row (chain_seq and id), "" when ok.
    """

    tenant_slug: str
    ok: bool
    rows: int
    head_seq: int
    head_hash: str
    start_seq: int
    last_seq: int
    last_hash: str
    complete: bool = True
    problem: str = ""


# -- rows as (chain_seq, id text, prev_hash, row_hash, body digest) --------------------------------

_Row = tuple[Any, str, str, str, Callable[[], str]]


def _float(value: float) -> float | int:
    return int(value) if value.is_integer() else value


def _json_float(text: str) -> float | int:
    # json.loads' parse_float: what audit.chain._plain makes of the float json.loads would return
    value = float(text)
    return int(value) if value.is_integer() else value


# jsonb arrives as text (Django registers a text loader for it); integral floats become ints, as
# audit.chain._plain turns them; keys of JSON objects are strings already. One decoder for every row.
_json = json.JSONDecoder(parse_float=_json_float).decode


def _utc_text(value: datetime.datetime) -> str:
    if value.tzinfo is not None:
        value = value.astimezone(datetime.timezone.utc)
    return value.isoformat(timespec="microseconds")


def _converters(model) -> tuple[list[str], list[tuple[str, int, Callable | None, bool]]]:
    """The selected columns of `model` and, for each hashed one, (attribute name, index in the
    row, converter or None, is JSON). Chosen from the field's type once per run: the same values
    `canonical_json` gets from `field.to_python` and `_plain` (uuid columns are read as text)."""
    columns = ["chain_seq", "id", "prev_hash", "row_hash"]
    plan = []
    for field in model._meta.concrete_fields:
        if field.attname in UNHASHED_FIELDS:
            continue
        kind = field.get_internal_type()
        if field.attname == "id":
            index = 1
        else:
            index = len(columns)
            columns.append(field.column)
        if kind == "JSONField":
            plan.append((field.attname, index, _json, True))
        elif kind == "DateTimeField":
            plan.append((field.attname, index, _utc_text, False))
        elif kind == "FloatField":
            plan.append((field.attname, index, _float, False))
        elif kind in ("UUIDField", "CharField", "TextField", "BigIntegerField", "IntegerField",
                      "PositiveIntegerField", "SmallIntegerField", "PositiveSmallIntegerField",
                      "PositiveBigIntegerField", "ForeignKey", "BigAutoField", "AutoField"):
            plan.append((field.attname, index, None, False))
        else:  # a column type added later: refuse rather than hash something else than the writer
            raise NotImplementedError(f"audit.verify has no fast converter for {field.attname} ({kind})")
    return columns, plan


def _postgres_rows(tenant_id: int, start: ChainStart, limit: int | None) -> Iterator[_Row]:
    """The tenant's chained rows after `start`, by (chain_seq, id), from one server-side cursor."""
    import psycopg.types.string

    model = apps.get_model("audit", "AuditEvent")
    columns, plan = _converters(model)
    quote = connection.ops.quote_name
    sql = (f"SELECT {', '.join(map(quote, columns))} FROM {quote(model._meta.db_table)} "
           f"WHERE tenant_id = %s AND chain_seq > %s ORDER BY chain_seq")
    params: list[Any] = [tenant_id, start.seq]
    if limit is not None:
        sql += " LIMIT %s"
        params.append(limit)
    encode = _ENCODER.encode
    sha256 = hashlib.sha256
    with connection.chunked_cursor() as cursor:
        # uuid columns as their text (lower-case, hyphenated: what str(UUID) gives), no UUID objects
        cursor.cursor.adapters.register_loader("uuid", psycopg.types.string.TextLoader)
        cursor.execute(sql, params)
        while batch := cursor.fetchmany(FETCH_ROWS):
            for row in batch:
                body: dict[str, Any] = {}
                for name, index, convert, is_json in plan:
                    value = row[index]
                    if value is None or value == "":
                        continue
                    if convert is not None:
                        value = convert(value)
                        if is_json and (value is None or value == ""):
                            continue
                    body[name] = value
                digest = sha256(encode(body).encode("utf-8")).hexdigest()
                yield row[0], row[1], row[2], row[3], (lambda digest=digest: digest)


def _orm_rows(tenant_id: int, start: ChainStart, limit: int | None) -> Iterator[_Row]:
    """The same rows through the ORM and `audit.chain.body_digest` (SQLite, any backend)."""
    model = apps.get_model("audit", "AuditEvent")
    names = [f.attname for f in model._meta.concrete_fields]
    query = (model.objects.filter(tenant_id=tenant_id, chain_seq__gt=start.seq)
             .order_by("chain_seq", "id").values(*names))
    if limit is not None:
        query = query[:limit]
    for row in query.iterator(chunk_size=2000):
        yield row["chain_seq"], str(row["id"]), row["prev_hash"], row["row_hash"], (lambda row=row: body_digest(row))


def _unchained_row(tenant_id: int) -> str | None:
    """The id (text) of the tenant's first row without a chain position, or None."""
    model = apps.get_model("audit", "AuditEvent")
    found = model.objects.filter(tenant_id=tenant_id, chain_seq__isnull=True).order_by("id").values_list(
        "id", flat=True).first()
    return None if found is None else str(found)


def verify_chain(tenant, *, start: ChainStart = FROM_THE_FIRST_ROW, limit: int | None = None) -> ChainVerdict:
    """Recompute the links of `tenant`'s rows after `start`; stop at the first fault.

    tenant: a Tenant (pk, slug). start: where to begin (ChainStart; the tenant's first row by
    default). limit: at most this many rows (None: to the end); a run stopped by it is ok but not
    complete, and the head is not compared.

    Faults, in the order they are checked for each row (the words of audit.chain.verify_tenant):
    a gap in chain_seq (rows deleted), a repeated position, a prev_hash that is not the previous
    row's hash (rows reordered or inserted), a hash that does not match the row's content (row
    edited); then a row without a chain position (inserted around the chain); when complete, a
    head that is not the last row (the newest rows deleted or the head altered). Returns a
    ChainVerdict; raises DatabaseError when the database cannot be read.
    """
    if connection.vendor != "postgresql":
        # No transaction of our own: SQLite's begins IMMEDIATE (settings), which would hold the
        # write lock, and so every audited call, for the whole run.
        return _verify_in_snapshot(tenant, start=start, limit=limit, postgres=False)
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        if outermost:  # the head and every row from one snapshot; inside a caller's transaction, theirs
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        return _verify_in_snapshot(tenant, start=start, limit=limit, postgres=True)


def _verify_in_snapshot(tenant, *, start: ChainStart, limit: int | None, postgres: bool) -> ChainVerdict:
    head = (apps.get_model("audit", "AuditChainHead").objects.filter(tenant_id=tenant.pk)
            .values("seq", "hash").first() or {"seq": 0, "hash": ""})
    expected_seq, prev_hash, count = start.seq + 1, start.prev_hash, 0

    def verdict(problem: str = "", complete: bool = True) -> ChainVerdict:
        return ChainVerdict(tenant.slug, not problem, count, head["seq"], head["hash"], start.seq,
                            expected_seq - 1, prev_hash, complete, problem)

    rows = (_postgres_rows if postgres else _orm_rows)(tenant.pk, start, limit)
    for seq, row_id, row_prev, row_hash, digest in rows:
        name = f"row chain_seq={seq} id={row_id}"
        if seq != expected_seq:
            if seq > expected_seq:
                return verdict(f"missing row(s) chain_seq={expected_seq}..{seq - 1} before {name}: deleted")
            return verdict(f"{name} repeats a chain position: inserted or reordered")
        if row_prev != prev_hash:
            return verdict(f"{name} does not link to chain_seq={seq - 1}: rows reordered, replaced or inserted")
        if link_hash(prev_hash, seq, digest()) != row_hash:
            return verdict(f"{name} does not match its hash: the row was edited")
        prev_hash, expected_seq, count = row_hash, seq + 1, count + 1
    unchained = _unchained_row(tenant.pk)
    if unchained is not None:
        return verdict(f"row id={unchained} has no chain position: it was inserted around the chain")
    if limit is not None and count >= limit and head["seq"] > expected_seq - 1:
        return verdict(complete=False)
    if head["seq"] != expected_seq - 1 or head["hash"] != prev_hash:
        return verdict(f"the chain head is at chain_seq={head['seq']} but the last row is chain_seq={expected_seq - 1}: "
                       f"the newest row(s) were deleted or the head was altered")
    return verdict()
