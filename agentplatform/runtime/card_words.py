"""The words a requester reads on a decision card of the chat: what became of a gated call, who
decided it and why, in English / Chinese. Codes (statuses, outcome codes) stay in the API; these
sentences are what a person sees, the same on a live card and on one rebuilt after a reload
(agentplatform.runtime.cards builds both from the stored request)."""
from __future__ import annotations

from typing import Any

NOTHING = "nothing was done / 未执行"

# Business refusals a tool answers when it ran and could not do it, in a person's words. Any other
# code reads as the generic sentence below (the code stays in the API's `outcome_code`).
FAILURE_WORDS: dict[str, str] = {
    "ORDER_NOT_CANCELLABLE": "the order can no longer be cancelled / 订单已无法取消",
    "ORDER_NOT_FOUND": "the order was not found / 未找到该订单",
    "ORDER_NOT_REFUNDABLE": "the order cannot be refunded / 该订单无法退款",
    "REFUND_EXCEEDS_AMOUNT": "the refund is more than what is left to refund / 退款金额超过可退余额",
    "ALREADY_REFUNDED": "the order was already refunded / 订单已退款",
    "LIMIT_EXCEEDED": "a limit of your organisation was reached / 已达到组织的限额",
    "POLICY_DENIED": "your organisation's policy no longer allows it / 组织策略已不再允许",
    "PERMISSION_DENIED": "you may no longer use this action / 您已无权执行此操作",
    "TOOL_STOPPED": "an administrator stopped this action / 管理员已停用此操作",
    "TOOL_NOT_FOUND": "this action is no longer offered to you / 此操作已不再向您提供",
}
FAILED_GENERIC = "it could not be done / 无法完成"

FIELD_LABELS: dict[str, str] = {"amount": "Amount / 金额", "reason": "Reason / 原因", "order_id": "Order / 订单"}

DECISION_WORDS: dict[str, str] = {
    "APPROVE": "approved / 批准",
    "REJECT": "rejected / 拒绝",
    "EDIT": "changed it and approved / 修改后批准",
    "RESPOND": "sent guidance instead / 给出指导意见",
}


def quoted(text: str) -> str:
    """`text` in quotes, or "" for an empty text."""
    return f"“{text}”" if text else ""


def failure_words(code: str) -> str:
    """A business failure or refusal code in a person's words (FAILURE_WORDS, else generic)."""
    return FAILURE_WORDS.get(code or "", FAILED_GENERIC)


def field_label(name: str) -> str:
    """A changed argument's label: known ones bilingual, others from the name ("order_id" -> "Order id")."""
    if name in FIELD_LABELS:
        return FIELD_LABELS[name]
    bare = name.replace("_", " ").strip()
    return bare[:1].upper() + bare[1:]


def value_text(name: str, value: Any, currency: str) -> str:
    """One changed value as a person reads it: an amount with its currency ("CNY 30.00"), an absent
    amount as the full remainder, text quoted, nothing as "—"."""
    if value is None or value == "":
        return "the full remaining amount / 全部余额" if name == "amount" else "—"
    if name == "amount":
        return f"{currency} {value}" if currency else str(value)
    if isinstance(value, str):
        return quoted(value)
    return str(value)


def change_text(change: dict[str, Any], currency: str) -> str:
    """'Amount / 金额: CNY 30.00 → CNY 20.00' from one {"field", "from", "to"} change (masked)."""
    name = str(change.get("field") or "")
    return (f"{field_label(name)}: {value_text(name, change.get('from'), currency)} → "
            f"{value_text(name, change.get('to'), currency)}")


def status_text(*, outcome: str, code: str, needs: str, decider: dict | None, reason: str,
                approvals: int, quorum: int, approvers: list[str], edited_by: list[str]) -> str:
    """The card's status sentence for a request whose real ending is `outcome` (approvals'
    outcome_of: PENDING, CONFIRMED, EXECUTED, FAILED, REFUSED, REJECTED, CANCELLED, SUPERSEDED,
    EXPIRED, RESPONDED, WITHDRAWN).

    code: the outcome code; needs: "requester" or "approvers"; decider: {"role", "name"} of who
    ended it or None; reason: masked reason or guidance; approvals/quorum: approvals that count
    now and how many are needed; approvers: names of those who approved; edited_by: names of those
    who changed the arguments. Returns one sentence, English / Chinese."""
    who = decider["name"] if decider else ""
    role = decider["role"] if decider else ""
    if outcome == "PENDING":
        if needs == "requester":
            return "Only you can confirm this call. / 仅您本人可以确认。"
        return f"Waiting for approvers / 等待审批人: {approvals} / {quorum} approved / 已批准"
    if outcome == "CONFIRMED":
        return "Approved — about to run. / 已批准，即将执行。"
    if outcome == "EXECUTED":
        text = "Done — it ran once. / 已执行。"
        if approvers:
            text += f" Approved by {', '.join(approvers)}. / 批准人：{', '.join(approvers)}。"
        if edited_by:
            text += f" Arguments edited by {', '.join(edited_by)} before it ran. / 按审批人修改后的参数执行。"
        return text
    if outcome == "FAILED":
        return f"It ran but did not succeed: {failure_words(code)}. / 已执行但未成功。"
    if outcome == "REFUSED":
        return f"Stopped just before it ran: {failure_words(code)} — {NOTHING}."
    if outcome == "REJECTED":
        if role == "requester":
            return f"Cancelled — {NOTHING}. You declined it. / 您已拒绝。"
        because = f" Reason / 原因: {quoted(reason)}" if reason else " No reason given. / 未说明原因。"
        return f"Rejected by {who or 'a reviewer / 审核人'} — {NOTHING}.{because}"
    if outcome == "CANCELLED":
        if code == "TOOL_STOPPED":
            return f"{who or 'An administrator'} stopped this action — {NOTHING}. / 管理员已停用此操作。"
        if role == "administrator" and who:
            return f"Run stopped by {who} — {NOTHING}. / 运行已被停止。"
        return f"Run stopped — {NOTHING}. / 运行已停止。"
    if outcome == "SUPERSEDED":
        return f"Replaced by a newer request for the same action — {NOTHING} here. / 已被同一操作的新请求取代。"
    if outcome == "EXPIRED":
        return f"Expired before anyone decided — {NOTHING}. / 无人及时决定，已过期。"
    if outcome == "RESPONDED":
        return (f"{who or 'A reviewer'} sent guidance instead of deciding — {NOTHING}. / 审核人给出了指导意见。"
                + (f" Guidance / 指导意见: {quoted(reason)}" if reason else ""))
    if outcome == "WITHDRAWN":
        return f"You withdrew it — {NOTHING}. / 您已撤回。"
    return f"Not done — {NOTHING}."
