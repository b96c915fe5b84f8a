"""Limits over history (docs/policy.md, "Limits and their isolation").

A limit of a tenant's bundle (policies.documents.Limit) caps, per tool and per key, the calls of a
sliding window of `window_seconds` ending now: `max_count` calls, and `max_sum` of one numeric
argument. The key is the value of `per`: an argument's value, the user's id for `user`, or
"tenant" for `tenant`.

What counts is the ledger `LimitUsage`: one row per call and limit, written when the call is
proposed (it runs now, or its request is created). A row counts while its call ran or may still
run: no request (a direct call that ran), or a request PENDING (and not past its deadline),
CONFIRMED or CONSUMED. A request that ended otherwise (rejected, expired, cancelled, superseded,
refused, withdrawn, answered) stops counting by its status alone; a call that did not run after all
(a direct call that failed, a consumed call whose tool failed) has its rows marked `released`.

Isolation. `limits_judge(..., reserve=True)` takes a PostgreSQL transaction-level advisory lock
per (tenant, limit, key) of the call's enforced limits, in a fixed order, before it counts; the
caller writes its reservation (`limits_reserve`) in the same transaction, so the lock is held until
that transaction commits and the next proposal for the same key counts it. N concurrent proposals
of one key are serialised; proposals of other keys, tools or tenants never wait on each other.
SQLite opens every transaction with BEGIN IMMEDIATE (settings), which serialises writers anyway.
Shadow limits are counted without a lock (they decide nothing).

`limits_judge(..., reserve=False)` is the dry run the admin's "try a call" shows: no lock, no write.
"""
from __future__ import annotations

import datetime
import hashlib
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import connection
from django.db.models import Count, Q, Sum

from approvals.models import ConfirmationRequest
from core import clock
from policies.documents import Limit
from policies.engine import Shadowed
from policies.limit_words import limit_message
from policies.models import LimitUsage

Status = ConfirmationRequest.Status
CODE = "LIMIT_EXCEEDED"
_ZERO = Decimal("0")


@dataclass(frozen=True)
class LimitJudged:
    """One limit judged for one call. key: the value of `per` it is counted under. amount: the
    call's value of the `max_sum` argument (None: no max_sum). count / total: the calls and the sum
    counted before this call in the window. exceeded: "" (within), "count", "sum" or "count+sum".
    message: the limit, the window and the cap in plain words (English / Chinese), with the
    limit's reason. own: the id of this call's own reservation row, if it has one already."""

    limit: Limit
    key: str
    amount: Decimal | None
    count: int
    total: Decimal
    exceeded: str = ""
    message: str = ""
    own: int | None = None

    @property
    def shadow(self) -> bool:
        return self.limit.mode == "shadow"

    def public(self) -> dict[str, Any]:
        """What the admin's "try a call" shows: JSON-safe."""
        limit = self.limit
        return {"id": limit.id, "mode": limit.mode, "per": limit.per, "key": self.key,
                "window_seconds": limit.window_seconds, "max_count": limit.max_count,
                "max_sum": str(limit.max_sum.value) if limit.max_sum else None,
                "argument": limit.max_sum.argument if limit.max_sum else None,
                "counted": self.count, "counted_sum": str(self.total),
                "amount": None if self.amount is None else str(self.amount),
                "exceeded": self.exceeded, "when_exceeded": limit.when_exceeded, "quorum": limit.quorum,
                "message": self.message}


@dataclass(frozen=True)
class LimitsVerdict:
    """The limits' verdict on one call. denied: an enforced `deny` limit is exceeded (code
    LIMIT_EXCEEDED, reason: what people read). gate: "" or "approval" with quorum (the highest
    among the exceeded `approval` limits). rules: the ids of the limits that denied or set the gate.
    shadow: what exceeded shadow limits would have done (never enforced). judged: every limit
    judged. locked: the keys of the enforced limits are locked for the rest of the transaction."""

    tenant_id: int
    tool_name: str
    user_id: int | None
    judged: tuple[LimitJudged, ...] = ()
    denied: bool = False
    code: str = ""
    reason: str = ""
    gate: str = ""
    quorum: int = 1
    rules: tuple[str, ...] = ()
    shadow: tuple[Shadowed, ...] = ()
    locked: bool = False
    at: datetime.datetime | None = field(default=None, compare=False)

    def public(self) -> dict[str, Any]:
        """JSON-safe summary for the admin's "try a call"."""
        return {"denied": self.denied, "code": self.code, "reason": self.reason, "gate": self.gate,
                "quorum": self.quorum if self.gate else None, "rules": list(self.rules),
                "shadow": [{"rule_id": s.rule_id, "would": s.would, "quorum": s.quorum} for s in self.shadow],
                "limits": [j.public() for j in self.judged]}


def limit_key(limit: Limit, arguments: dict[str, Any], user_id: int | None) -> str:
    """The key `limit` counts a call under: "tenant", the user's id, or the argument's value as
    text ("" when the argument is absent; values longer than 200 characters by their SHA-256).
    A text value is keyed folded (Unicode NFKC, surrounding whitespace dropped, case folded), so
    " ACC-1", "acc-1" and the full-width "ＡＣＣ-1" share one cap: spellings a tool may treat as one
    value never split it (folding only ever joins keys, which is stricter, never lenient)."""
    if limit.per == "tenant":
        return "tenant"
    if limit.per == "user":
        return str(user_id or "")
    value = arguments.get(limit.per)
    if value is None:
        text = ""
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = unicodedata.normalize("NFKC", value).strip().casefold()
    else:
        text = str(value)
    return text if len(text) <= 200 else "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _shown(limit: Limit, arguments: dict[str, Any], key: str) -> str:
    """The key as the call spelt it, for messages (the ledger keeps it folded: limit_key)."""
    value = arguments.get(limit.per) if limit.per not in ("user", "tenant") else None
    return value[:200] if isinstance(value, str) else key


def limit_amount(limit: Limit, arguments: dict[str, Any]) -> Decimal | None:
    """The call's value of the limit's `max_sum` argument as a Decimal (0 when absent or not a
    number); None for a limit without max_sum."""
    if limit.max_sum is None:
        return None
    value = arguments.get(limit.max_sum.argument)
    if value is None or isinstance(value, bool):
        return _ZERO
    try:
        amount = Decimal(str(value))
    except (InvalidOperation, ValueError):
        return _ZERO
    return amount if amount.is_finite() else _ZERO


def _counted(tenant_id: int, now: datetime.datetime):
    """LimitUsage rows of the tenant that count at `now` (any window)."""
    live = (Q(confirmation__isnull=True) | Q(confirmation__status__in=(Status.CONFIRMED, Status.CONSUMED))
            | Q(confirmation__status=Status.PENDING, confirmation__expires_at__gt=now))
    return LimitUsage.objects.filter(tenant_id=tenant_id, released=False).filter(live)


def _lock_id(tenant_id: int, limit_id: str, key: str) -> int:
    digest = hashlib.sha256(f"limit\x1f{tenant_id}\x1f{limit_id}\x1f{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _lock(ids: Iterable[int]) -> None:
    """Transaction-level advisory locks on `ids`, taken in ascending order in one statement (so two
    calls locking overlapping keys never deadlock on each other); released when the transaction
    ends. A no-op on SQLite, whose IMMEDIATE transactions already serialise writers."""
    ordered = sorted(set(ids))
    if not ordered or connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(["pg_advisory_xact_lock(%s)"] * len(ordered)), ordered)


def limits_judge(*, tenant_id: int, user_id: int | None, tool_name: str, limits: Sequence[Limit],
                 arguments: dict[str, Any], reserve: bool = False, confirmation_id: Any = None,
                 now: datetime.datetime | None = None) -> LimitsVerdict:
    """Judge the `limits` of `tool_name` (Compiled.limits_for) for one call with the policy
    `arguments` (CheckedCall.policy_arguments: normalised, with the tool's fills) by `user_id` in
    `tenant_id`, over each limit's window ending at `now` (default: the clock's now).

    reserve: False is a dry run (no lock, no write: the admin's "try a call"). True takes the
    advisory locks of the enforced limits' keys for the rest of the caller's transaction (raises
    RuntimeError outside one), so the caller's `limits_reserve` of this verdict, in the same
    transaction, cannot be split by a concurrent proposal.
    confirmation_id: the call's request when it is judged again at consume time: its own rows and
    every row reserved after them are not counted (it was counted once, in its place); a limit it
    has no row for (added while it waited) counts everything in the window.

    Returns a LimitsVerdict (deny beats approval; the strongest quorum wins). Queries: one per
    limit, plus one for the locks and one for the call's own rows when `confirmation_id` is given.
    """
    if not limits:
        return LimitsVerdict(tenant_id=tenant_id, tool_name=tool_name, user_id=user_id)
    keyed = [(limit, limit_key(limit, arguments, user_id)) for limit in limits]
    if reserve:
        if not connection.in_atomic_block:
            raise RuntimeError("limits_judge(reserve=True) must run inside the transaction that reserves")
        _lock(_lock_id(tenant_id, limit.id, key) for limit, key in keyed if limit.mode == "enforce")
    now = now or clock.now()  # after the locks: a reservation's time follows the one it waited for
    own: dict[str, int] = {}
    if confirmation_id is not None:
        own = dict(LimitUsage.objects.filter(tenant_id=tenant_id, confirmation_id=confirmation_id)
                   .values_list("limit_id", "id"))
    counted = _counted(tenant_id, now)
    judged = []
    for limit, key in keyed:
        rows = counted.filter(limit_id=limit.id, key=key,
                              occurred_at__gt=now - datetime.timedelta(seconds=limit.window_seconds))
        if limit.id in own:
            rows = rows.filter(id__lt=own[limit.id])
        got = rows.aggregate(n=Count("id"), total=Sum("amount"))
        count, total = got["n"] or 0, got["total"] or _ZERO
        amount = limit_amount(limit, arguments)
        over = []
        if limit.max_count is not None and count + 1 > limit.max_count:
            over.append("count")
        if limit.max_sum is not None and total + (amount or _ZERO) > limit.max_sum.value:
            over.append("sum")
        exceeded = "+".join(over)
        judged.append(LimitJudged(limit=limit, key=key, amount=amount, count=count, total=total, exceeded=exceeded,
                                  message=limit_message(limit, _shown(limit, arguments, key), count, total, amount,
                                                   exceeded) if exceeded else "",
                                  own=own.get(limit.id)))
    return _verdict(tenant_id, tool_name, user_id, judged, locked=reserve, at=now)


def _verdict(tenant_id: int, tool_name: str, user_id: int | None, judged: list[LimitJudged], *, locked: bool,
             at: datetime.datetime) -> LimitsVerdict:
    over = [j for j in judged if j.exceeded]
    shadow = tuple(sorted({Shadowed(j.limit.id, "DENY" if j.limit.when_exceeded == "deny" else "APPROVAL",
                                    None if j.limit.when_exceeded == "deny" else j.limit.quorum)
                           for j in over if j.shadow}, key=lambda s: s.rule_id))
    enforced = [j for j in over if not j.shadow]
    common = {"tenant_id": tenant_id, "tool_name": tool_name, "user_id": user_id, "judged": tuple(judged),
              "shadow": shadow, "locked": locked, "at": at}
    denies = [j for j in enforced if j.limit.when_exceeded == "deny"]
    if denies:
        return LimitsVerdict(denied=True, code=CODE, reason="; ".join(j.message for j in denies)[:2000],
                             rules=tuple(sorted(j.limit.id for j in denies)), **common)
    approvals = [j for j in enforced if j.limit.when_exceeded == "approval"]
    if approvals:
        quorum = max(j.limit.quorum or 1 for j in approvals)
        return LimitsVerdict(gate="approval", quorum=quorum, reason="; ".join(j.message for j in approvals)[:2000],
                             rules=tuple(sorted(j.limit.id for j in approvals if (j.limit.quorum or 1) == quorum)),
                             **common)
    return LimitsVerdict(**common)


def limits_reserve(verdict: LimitsVerdict, *, confirmation_id: Any = None, tool_call_id: str = "") -> list[int]:
    """Record the call judged by `verdict` (from limits_judge(reserve=True), in this transaction)
    in the ledger: one LimitUsage row per judged limit, linked to its request `confirmation_id`
    (None: the call runs now). A limit the request already has a row for keeps that row (its key
    and amount updated to the call as it is now: an approver may have lowered the amount).

    Returns the ids of the rows written or updated. Raises ValueError for a denied verdict (a
    denied call is not counted) or one judged without the locks.
    """
    if verdict.denied or not verdict.locked:
        raise ValueError("only a verdict judged with reserve=True that did not deny can be reserved")
    ids, new = [], []
    for judged in verdict.judged:
        if judged.own is not None:
            LimitUsage.objects.filter(pk=judged.own).update(key=judged.key, amount=judged.amount, released=False)
            ids.append(judged.own)
            continue
        new.append(LimitUsage(tenant_id=verdict.tenant_id, limit_id=judged.limit.id, tool_name=verdict.tool_name[:100],
                              key=judged.key, amount=judged.amount, occurred_at=verdict.at or clock.now(),
                              confirmation_id=confirmation_id, tool_call_id=tool_call_id[:128],
                              user_id=verdict.user_id))
    if new:
        LimitUsage.objects.bulk_create(new)  # one INSERT: a bundle has at most 500 limits
        ids.extend(row.pk for row in new if row.pk is not None)
    return ids


def limits_release(*, ids: Iterable[int] = (), confirmation_id: Any = None) -> int:
    """Stop counting calls that did not run after all: the rows `ids`, or every row of the request
    `confirmation_id`. Returns how many rows were released. One UPDATE."""
    ids = list(ids)
    if not ids and confirmation_id is None:
        return 0
    rows = LimitUsage.objects.filter(released=False)
    rows = rows.filter(pk__in=ids) if ids else rows.filter(confirmation_id=confirmation_id)
    return rows.update(released=True)
