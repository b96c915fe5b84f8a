"""Verifying a tenant's audit hash chain (audit.chain) fast, from any start point.

`verify_chain(tenant, start=..., limit=...)` recomputes the links of the tenant's rows after
`start` and names the first fault, with the same faults and the same words as
`audit.verify_reference.verify_tenant` (the reference, which reads through the ORM and checks from row 1).

Why a second implementation: the reference spends ~0.1 ms a row in the ORM (`.values()` and a
`field.to_python` per column per row), 18 minutes at 10M rows. Here, on PostgreSQL, one read-only
REPEATABLE READ transaction streams the rows through a server-side cursor in `chain_seq` order
(served by the `audit_event_chain_position` index). PostgreSQL joins the plain columns (text,
uuid, integers, datetimes) into ready JSON members; Python adds the JSON and float columns,
converted as `audit.chain._plain` converts them, and hashes: the same text, byte for byte, as
`audit.chain.canonical_json` (tests/audit/test_incremental_verify.py compares the digests on
every kind of column). Should the two ever differ on a row, its digest does not give its hash and
the row is re-checked through `audit.chain.body_digest` before anything is reported, so the fast
path can cost time, never a false "edited". The head and the rows are read in that one snapshot,
so rows appended while the run reads do not look like a head ahead of the chain. SQLite takes the
ORM path of the reference, from the same start point.

The start point (`ChainStart`: the last chain_seq before the first row to check, and that row's
hash) is what incremental verification (audit.verify_checkpoint) and the archive cut of retention
plug in: the first row checked must carry `start.prev_hash` as its prev_hash.
"""
from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any, Iterator

from django.apps import apps
from django.db import connection, transaction

from audit.chain import UNHASHED_FIELDS, body_digest, link_hash

logger = logging.getLogger(__name__)
FETCH_ROWS = 5000  # rows per FETCH of the server-side cursor: one round trip each
_JSON_CACHE_SIZE = 4096  # distinct texts remembered per JSON column
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

_Row = tuple[Any, str, str, str, str]


def _float(value: float) -> float | int:
    return int(value) if value.is_integer() else value


def _json_float(text: str) -> float | int:
    # json.loads' parse_float: what audit.chain._plain makes of the float json.loads would return
    value = float(text)
    return int(value) if value.is_integer() else value


# jsonb arrives as text (Django registers a text loader for it); integral floats become ints, as
# audit.chain._plain turns them; keys of JSON objects are strings already. One decoder for every row.
_json = json.JSONDecoder(parse_float=_json_float).decode


_SEGMENT, _JSON, _FLOAT = 0, 1, 2
_INTEGERS = ("BigIntegerField", "IntegerField", "PositiveIntegerField", "SmallIntegerField",
             "PositiveSmallIntegerField", "PositiveBigIntegerField", "ForeignKey", "BigAutoField", "AutoField")


def _sql_member(field, quote) -> str:
    """SQL for `"name":<JSON value>` of one plain column, NULL when canonical_json leaves it out."""
    column, key = quote(field.column), f"'\"{field.attname}\":'"
    kind = field.get_internal_type()
    if kind in ("CharField", "TextField"):
        # to_json escapes as json.dumps(ensure_ascii=False) does: \" \\ \b \f \n \r \t, other
        # control characters as \u00xx, everything else kept
        return f"CASE WHEN {column} = '' THEN NULL ELSE {key} || to_json({column}::text)::text END"
    if kind == "UUIDField":
        return f"{key} || '\"' || {column}::text || '\"'"
    if kind == "DateTimeField":
        return (f"{key} || '\"' || to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US') "
                f"|| '+00:00\"'")
    if kind in _INTEGERS:
        return f"{key} || {column}::text"
    # a column type added later: refuse rather than hash something else than the writer
    raise NotImplementedError(f"audit.verify has no fast form for {field.attname} ({kind})")


def _layout(model) -> tuple[list[str], list[tuple[int, int, str]]]:
    """What to SELECT and how to join it into the canonical JSON text, chosen once per run.

    Returns (select expressions, plan). The first four expressions are chain_seq, id (text),
    prev_hash, row_hash. The body's members go in key order; runs of plain columns (text, uuid,
    integers, datetimes) are joined by PostgreSQL into one segment each (`concat_ws` skips NULL
    members: NULL and "" columns are left out, as canonical_json leaves them); JSON and float
    columns are read as such and converted here as `_plain` does. Plan: (kind, index in the row,
    '"name":' prefix) per segment or column.
    """
    quote = connection.ops.quote_name
    select = [quote("chain_seq"), f"{quote('id')}::text", quote("prev_hash"), quote("row_hash")]
    plan: list[tuple[int, int, str]] = []
    segment: list[str] = []

    def close_segment() -> None:
        if segment:
            plan.append((_SEGMENT, len(select), ""))
            select.append(f"concat_ws(',', {', '.join(segment)})")
            segment.clear()

    for field in sorted(model._meta.concrete_fields, key=lambda f: f.attname):
        if field.attname in UNHASHED_FIELDS:
            continue
        kind = field.get_internal_type()
        if kind in ("JSONField", "FloatField"):
            close_segment()
            plan.append((_JSON if kind == "JSONField" else _FLOAT, len(select), f'"{field.attname}":'))
            select.append(quote(field.column))
        else:
            segment.append(_sql_member(field, quote))
    close_segment()
    return select, plan


def _postgres_rows(tenant_id: int, start: ChainStart, limit: int | None) -> Iterator[_Row]:
    """The tenant's chained rows after `start`, by chain_seq (unique per tenant: the index
    `audit_event_chain_position` serves the order), from one server-side cursor."""
    model = apps.get_model("audit", "AuditEvent")
    select, plan = _layout(model)
    quote = connection.ops.quote_name
    sql = (f"SELECT {', '.join(select)} FROM {quote(model._meta.db_table)} "
           f"WHERE tenant_id = %s AND chain_seq > %s ORDER BY chain_seq")
    params: list[Any] = [tenant_id, start.seq]
    if limit is not None:
        sql += " LIMIT %s"
        params.append(limit)
    encode, decode, sha256 = _ENCODER.encode, _json, hashlib.sha256
    # The canonical member of each JSON column by its stored text: policy rules, channels and
    # execution holders repeat from row to row, and decoding and re-encoding them is the costliest
    # step here. Bounded: once full, a column's cache is emptied and refilled.
    members_of: dict[int, dict[str, str]] = {index: {} for kind, index, _ in plan if kind == _JSON}
    with connection.chunked_cursor() as cursor:
        cursor.execute(sql, params)
        while batch := cursor.fetchmany(FETCH_ROWS):
            for row in batch:
                members = []
                for kind, index, prefix in plan:
                    value = row[index]
                    if kind == _SEGMENT:
                        if value:
                            members.append(value)
                    elif value is None:
                        continue
                    elif kind == _JSON:
                        cache = members_of[index]
                        member = cache.get(value)
                        if member is None:
                            decoded = decode(value)
                            member = "" if decoded is None or decoded == "" else prefix + encode(decoded)
                            if len(cache) >= _JSON_CACHE_SIZE:
                                cache.clear()
                            cache[value] = member
                        if member:
                            members.append(member)
                    else:
                        members.append(prefix + encode(_float(value)))
                body = "{" + ",".join(members) + "}"
                yield row[0], row[1], row[2], row[3], sha256(body.encode("utf-8")).hexdigest()


def _reference_digest(row_id: str) -> str:
    """`audit.chain.body_digest` of one row read through the ORM: what the fast path's digest
    must equal; asked only when the fast digest does not give the row's hash, so a difference in
    the SQL-built text can never be reported as an edit."""
    model = apps.get_model("audit", "AuditEvent")
    names = [f.attname for f in model._meta.concrete_fields]
    return body_digest(model.objects.filter(pk=row_id).values(*names).get())


def _orm_rows(tenant_id: int, start: ChainStart, limit: int | None) -> Iterator[_Row]:
    """The same rows through the ORM and `audit.chain.body_digest` (SQLite, any backend)."""
    model = apps.get_model("audit", "AuditEvent")
    names = [f.attname for f in model._meta.concrete_fields]
    query = (model.objects.filter(tenant_id=tenant_id, chain_seq__gt=start.seq)
             .order_by("chain_seq", "id").values(*names))
    if limit is not None:
        query = query[:limit]
    for row in query.iterator(chunk_size=2000):
        yield row["chain_seq"], str(row["id"]), row["prev_hash"], row["row_hash"], body_digest(row)


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

    Faults, in the order they are checked for each row (the words of audit.verify_reference.verify_tenant):
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
        if link_hash(prev_hash, seq, digest) != row_hash:
            if not postgres or link_hash(prev_hash, seq, _reference_digest(row_id)) != row_hash:
                return verdict(f"{name} does not match its hash: the row was edited")
            logger.warning("audit.verify: the fast canonical form of %s differs from the writer's; "
                           "the row verified through audit.chain", name)
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
