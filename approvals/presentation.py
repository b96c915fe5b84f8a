"""How a request reads to a person (dashboard card, notifications, the model): labelled fact rows
built from approvals.selectors.approval_facts, who ended the request, and why a decided call waits
again. Labels are bilingual like the pages; unknown fact names fall back to their name."""
from __future__ import annotations

from typing import Any

from approvals.models import ConfirmationRequest

LABELS: dict[str, str] = {  # also the order facts are shown in
    "refund_amount": "This refund / 本次退款",
    "full_refund": "Full refund / 全额退款",
    "order_id": "Order / 订单",
    "order_status": "Order status / 订单状态",
    "shipped": "Shipped / 已发货",
    "items": "Items / 商品",
    "order_total": "Order total / 订单金额",
    "currency": "Currency / 币种",
    "already_refunded": "Already refunded / 已退款",
    "earlier_refunds": "Earlier refunds / 此前退款",
    "refundable_remainder": "Refundable remainder / 可退余额",
    "customer": "Customer / 客户",
    "customer_other_orders": "Customer's other orders (last 100) / 客户其他订单（最近100笔）",
    "customer_refunded_orders": "…of them refunded / 其中已退款",
}


def fact_text(value: Any) -> str:
    """One fact as text: money dicts by their `display`, booleans as Yes/No, lists joined."""
    if isinstance(value, dict):
        if "display" in value:
            return str(value["display"])
        return ", ".join(f"{k}: {fact_text(v)}" for k, v in value.items())
    if isinstance(value, bool):
        return "Yes / 是" if value else "No / 否"
    if isinstance(value, list):
        return ", ".join(fact_text(v) for v in value) if value else "none recorded / 无记录"
    if value is None:
        return "—"
    return str(value)


def fact_rows(facts: dict[str, Any]) -> list[dict[str, Any]]:
    """[{"name", "label", "value", "changed", "was"}] from an approval_facts() answer: the live
    value when there is one (open requests), else the snapshot; `changed` marks a fact that differs
    from the snapshot, `was` is the snapshot's text then."""
    snapshot, live = facts.get("snapshot") or {}, facts.get("live")
    current = live if live is not None else snapshot
    rows = []
    order = list(LABELS)
    # The database may reorder a JSON object's keys (PostgreSQL jsonb): show known facts in LABELS order.
    for name in sorted(snapshot, key=lambda n: (order.index(n) if n in order else len(order), n)):
        changed = name in (facts.get("changed") or [])
        rows.append({"name": name, "label": LABELS.get(name, name.replace("_", " ")),
                     "value": fact_text(current.get(name, snapshot[name])), "changed": changed,
                     "was": fact_text(snapshot[name]) if changed else ""})
    return rows


def regate_reason(*, cause: str, tool: str, quorum: int, counted: int, risk: str) -> tuple[str, str]:
    """(English, Chinese) sentences telling the requester why a decided call waits for approvers
    again (approvals.errors.Regate.CAUSES); docs/decisions.md quotes them. quorum: approvals needed
    now; counted: approvals that still count; risk: the tool's risk now."""
    people = f"{quorum} approver" + ("s" if quorum != 1 else "")
    if cause == "APPROVERS_NOW":
        return (f"The policy of {tool} became stricter after you confirmed: it now needs {people} (risk {risk}). "
                f"Your request is waiting for them.",
                f"您确认后 {tool} 的策略变得更严格：现在需要 {quorum} 位审批人（风险 {risk}），您的请求正在等待审批。")
    if cause == "QUORUM_RAISED":
        return (f"The policy of {tool} became stricter after it was approved: it now needs {people} and "
                f"{counted} of them count so far. Your request is waiting for the others.",
                f"审批通过后 {tool} 的策略变得更严格：现在需要 {quorum} 位审批人，目前 {counted} 位有效，"
                f"您的请求正在等待其余审批人。")
    return (f"Only {counted} of the {quorum} approvals of {tool} still count: an approver lost the right to "
            f"approve it, left the tenant, or is not independent of the request. Your request is waiting for approvers.",
            f"{tool} 需要 {quorum} 位审批，其中只有 {counted} 位仍然有效：有审批人失去了审批权限、已离开该租户或与请求不独立，"
            f"您的请求正在等待审批。")


def decider(request: ConfirmationRequest) -> dict[str, str] | None:
    """Who ended `request`, as shown to the model and the people: {"role", "username"} with role
    "requester" (declined or confirmed with the token), "approver" (an Approval decided it), or
    "administrator" (cancelled the run, or stopped the tool); None when the platform ended it (expiry, supersession,
    refusal). Reads `decided_by` (select it with the request)."""
    if request.decided_by_id is None or request.decided_by is None:
        return None
    if request.outcome_code == "TOOL_STOPPED":  # an administrator stopped the tool (a kill switch)
        role = "administrator"
    elif request.decided_by_id == request.user_id:
        role = "requester"
    elif request.outcome_code == "RUN_ENDED":
        role = "administrator"
    else:
        role = "approver"
    return {"role": role, "username": request.decided_by.get_username()}
