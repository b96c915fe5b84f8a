"""The business object an audit row is about (an order id, a tracking number, a SKU, a control-plane
object), kept in `AuditEvent.business_object` so "every row about order A202607290001" is one
index range (tenant, business_object, chain_seq) instead of a scan of the arguments.

The column is derived from the row's own chained content when the row is written (and by a
migration for older rows); it is not part of the row's hash (audit.chain.UNHASHED_FIELDS), so
filling it never changes how a row hashes. It is a search aid, not evidence: the evidence is the
masked arguments it was derived from, which the chain covers.
"""
from __future__ import annotations

from typing import Any

MAX_LENGTH = 128
# Argument names that name a business object, in order of preference when a call names several
# (a refund names its order before anything else; an inventory query its SKU before its warehouse).
PREFERRED_KEYS = ("order_id", "tracking_number", "ticket_id", "sku", "customer_id", "warehouse_code")
_OBJECT_SUFFIXES = ("_id", "_number", "_code")


def _text(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return ""
    return str(value).strip()[:MAX_LENGTH]


def business_object_of(*, decision: str, masked_arguments: Any) -> str:
    """The business object of one row, or "" when it names none.

    decision: the row's AuditEvent.Decision value. masked_arguments: the row's masked arguments
    (any JSON value). A control-plane change (CONTROL_CHANGE) is about `masked_arguments.object.id`
    (e.g. "acme/refund_order", a username); a tool call is about the first of PREFERRED_KEYS among
    its top-level arguments, else the first argument (by name) ending in _id, _number or _code.
    Values that are not text or integers (a masked dict, a list) name nothing. Never raises.
    """
    if not isinstance(masked_arguments, dict):
        return ""
    if decision == "CONTROL_CHANGE":
        obj = masked_arguments.get("object")
        return _text(obj.get("id")) if isinstance(obj, dict) else ""
    for key in PREFERRED_KEYS:
        found = _text(masked_arguments.get(key))
        if found:
            return found
    for key in sorted(k for k in masked_arguments if isinstance(k, str) and k.endswith(_OBJECT_SUFFIXES)):
        found = _text(masked_arguments[key])
        if found:
            return found
    return ""
