"""The offline model's final answers: plain-language text from the tool results of a turn.

The offline planner (`agentplatform.llm.offline`) writes one line per result, in the user's
language, and never repeats anything shaped like a confirmation token (`ct_...`).
"""
from __future__ import annotations

import json
from typing import Any

from core.redaction.text import redact_tokens
from tools.display import tool_label

# The demo's remote tool (mcp_sources.demo_server, registered as the MCP server "logistics"),
# called by its wire name like any other tool.
TRACK_TOOL = "logistics__track_shipment"


def text_of(message: dict[str, Any]) -> str:
    """The text of a message whose content is a string or a list of content parts."""
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def _calls_by_id(messages: list[dict[str, Any]]) -> dict[str, tuple[str, dict[str, Any]]]:
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    for message in messages:
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            try:
                args = json.loads(function.get("arguments") or "{}")
            except ValueError:
                args = {}
            calls[call.get("id", "")] = (function.get("name", "?"), args if isinstance(args, dict) else {})
    return calls


def _inventory(data: dict[str, Any], zh: bool) -> str:
    rows = data.get("warehouses") or []
    available = data.get("total_available", sum(w.get("available_quantity", 0) for w in rows))
    locked = sum(w.get("locked_quantity", 0) for w in rows)
    if zh:
        parts = "；".join(f"{w.get('warehouse_code')}：可用 {w.get('available_quantity')}，锁定 {w.get('locked_quantity')}"
                         for w in rows)
        return f"{data.get('sku')}：可用 {available} 件，锁定 {locked} 件（{parts}）。"
    parts = "; ".join(f"{w.get('warehouse_code')}: {w.get('available_quantity')} available, "
                      f"{w.get('locked_quantity')} locked" for w in rows)
    return f"{data.get('sku')}: {available} available, {locked} locked ({parts})."


def _orders(data: dict[str, Any], zh: bool) -> str:
    items = data.get("items") or []
    if not items:
        return "没有找到订单。" if zh else "No orders found."
    listed = ", ".join(f"{o.get('order_id')} ({o.get('status')}, {o.get('amount')})" for o in items)
    more = data.get("next_cursor")
    total = data.get("total", len(items))
    if zh:
        return f"共 {total} 个订单，本页 {len(items)} 个：{listed}。" + ("还有下一页。" if more else "")
    return (f"Found {total} orders, showing {len(items)}: {listed}."
            + (" There are more on the next page." if more else ""))


def _success(name: str, args: dict[str, Any], data: Any, message: str, zh: bool) -> str:
    data = data if isinstance(data, dict) else {}
    order_id = data.get("order_id") or args.get("order_id", "")
    if name == "query_inventory":
        return _inventory(data, zh)
    if name == "list_orders":
        return _orders(data, zh)
    # Record ids (cancellation_id, refund_id) stay in the API and the audit trail: people read the order.
    if name == "cancel_order":
        return f"订单 {order_id} 已取消。" if zh else f"Order {order_id} has been cancelled."
    if name == "refund_order":
        amount = data.get("amount", args.get("amount", "?"))
        return f"订单 {order_id} 已退款 {amount}。" if zh else f"Refunded {amount} for order {order_id}."
    if name == TRACK_TOOL:
        number, status = data.get("tracking_number", args.get("tracking_number", "?")), data.get("status", "?")
        carrier, city = data.get("carrier", "?"), data.get("city", "?")
        return f"运单 {number}：{status}，承运商 {carrier}，当前在 {city}。" if zh else \
            f"Parcel {number} is {status} with {carrier}, now in {city}."
    label = _label(name, zh)
    return f"{label} 已完成：{message}" if zh else f"{label}: done. {message}"


_FAILURES = {
    "REJECTED": ("{action} was rejected{by}; nothing was done.{why}", "{action}已被{by_zh}拒绝，未执行任何操作。{why_zh}"),
    "CONFIRMATION_EXPIRED": ("the confirmation for {action} expired; nothing was done.",
                             "{action}的确认已过期，未执行任何操作。"),
    "WITHDRAWN": ("you withdrew {action}; nothing was done.", "您已撤回{action}，未执行任何操作。"),
    "SUPERSEDED": ("a newer request for the same action replaced {action}; nothing was done here.",
                   "{action}已被同一操作的新请求取代，此处未执行任何操作。"),
    "CONFIRMATION_REQUIRED": ("{action} needs confirmation before it runs: {message}", "{action}需要确认后才能执行：{message}"),
    "ORDER_NOT_CANCELLABLE": ("order {order_id} cannot be cancelled: {message}", "订单 {order_id} 无法取消：{message}"),
    # What the person may not use is not described: only that it is not offered to them here.
    "TOOL_NOT_FOUND": ("I cannot {verb} here: it is not among the actions offered to you, so nothing was done.",
                       "我在这里无法执行{action}：它不在向您提供的操作之中，未执行任何操作。"),
    "PERMISSION_DENIED": ("you are not allowed to {verb}; nothing was done.", "您无权执行{action}，未执行任何操作。"),
}


def _label(name: str, zh: bool) -> str:
    """The tool's title for people in one language ("Refund an order" / "订单退款")."""
    title = tool_label(name)
    english, _, chinese = title.partition(" / ")
    return (chinese or english) if zh else english


def _action(name: str, args: dict[str, Any], zh: bool) -> str:
    target = args.get("order_id") or args.get("sku") or args.get("tracking_number") or ""
    label = _label(name, zh)
    if not target:
        return label
    return f"{label}（{target}）" if zh else f"{label} ({target})"


def _decider(data: Any) -> tuple[str, str, str]:
    """(who, role, reason) from a REJECTED result's data: who decided (display name, else username), "approver" or
    "requester", and the reason; "" where unknown."""
    data = data if isinstance(data, dict) else {}
    decider = data.get("decided_by") if isinstance(data.get("decided_by"), dict) else {}
    who = decider.get("name") or decider.get("username") or ""
    return str(who), str(decider.get("role") or ""), str(data.get("reason") or "")


def _failure(name: str, args: dict[str, Any], code: str, message: str, retryable: bool, zh: bool,
             data: Any = None) -> str:
    order_id = args.get("order_id", "")
    action = _action(name, args, zh)
    who, role, reason = _decider(data)
    if code == "REJECTED" and role == "requester":
        text = f"您拒绝了{action}，未执行任何操作。" if zh else f"You rejected {action}; nothing was done."
        return text
    en, cn = _FAILURES.get(code, ("{action} did not succeed: {message}", "{action}未成功：{message}"))
    message = message.strip() or ("未成功" if zh else "it did not succeed")
    if message[-1] not in ".。!！?？":
        message += "。" if zh else "."
    text = (cn if zh else en).format(
        action=action, message=message, order_id=order_id, verb=action[:1].lower() + action[1:],
        by=f" by {who}" if who else "", by_zh=f" {who} " if who else "审批人",
        why=f" Reason: “{reason}”." if reason else "", why_zh=f"原因：“{reason}”。" if reason else "")
    text = text[0].upper() + text[1:]
    if retryable:
        text += " 可以稍后重试。" if zh else " You can try again later."
    return text


def answer_from_results(messages: list[dict[str, Any]], *, chinese: bool) -> str:
    """A plain-language answer from the tool messages after the last assistant message.

    Each tool message content is a ToolResult JSON `{success, code, message, terminal, retryable,
    data}`; an IDEMPOTENT_HIT replay reads like a normal success. Returns the answer text, one line
    per result, with confirmation-token-shaped strings redacted. Raises nothing.
    """
    calls = _calls_by_id(messages)
    results: list[dict[str, Any]] = []
    for message in reversed(messages):
        if message.get("role") != "tool":
            break
        results.insert(0, message)
    lines = []
    for message in results:
        name, args = calls.get(message.get("tool_call_id", ""), ("tool", {}))
        try:
            result = json.loads(text_of(message))
        except ValueError:
            result = None
        if not isinstance(result, dict):
            label = _label(name, chinese)
            lines.append(f"{label}：{text_of(message)}" if chinese else f"{label}: {text_of(message)}")
        elif result.get("success"):
            line = _success(name, args, result.get("data"), str(result.get("message", "")), chinese)
            note = str(result.get("message", ""))
            if note.startswith("approvers edited the arguments"):  # the user learns what was changed
                line += f" （{note.split('; it ran')[0]}）" if chinese else f" (Note: {note.split('; it ran')[0]}.)"
            lines.append(line)
        elif result.get("code") == "APPROVER_GUIDANCE":
            # Guidance is neither a success nor a rejection: relay it and ask how to go on.
            data = result.get("data") if isinstance(result.get("data"), dict) else {}
            who = (data.get("responded_by") or {}).get("username") or ("审批人" if chinese else "an approver")
            guidance = str(data.get("guidance") or "")
            action = _action(name, args, chinese)
            lines.append(f"审批人 {who} 没有执行 {action}，而是给出了指导意见：“{guidance}”。未执行任何操作；请告诉我如何继续。"
                         if chinese else
                         f"Approver {who} did not run {action} and sent guidance instead: “{guidance}”. "
                         f"Nothing was done; tell me how you would like to proceed.")
        else:
            lines.append(_failure(name, args, str(result.get("code", "ERROR")), str(result.get("message", "")),
                                  bool(result.get("retryable")), chinese, result.get("data")))
    return redact_tokens("\n".join(lines), placeholder="[redacted]", any_length=True)
