"""Plain bilingual words for what notifications say: risk levels, outcomes, argument names and
the reasons a request no longer needs an approver. Codes stay in the webhook's JSON fields; people
read these."""
from __future__ import annotations

from typing import Any

from approvals.presentation import fact_text
from tools.display import humanize

RISK = {"LOW": "Low / 低", "MEDIUM": "Medium / 中", "HIGH": "High / 高", "CRITICAL": "Critical / 极高"}

# outcome (approvals.selectors.outcome_of) -> (what the requester reads, the subject's word)
OUTCOME = {
    "PENDING": ("still waiting for approvers / 仍在等待审批", "still waiting / 仍在等待"),
    "CONFIRMED": ("approved; it runs now / 已批准，即将执行", "approved / 已批准"),
    "EXECUTED": ("approved and executed / 已批准并执行", "approved / 已批准"),
    "FAILED": ("approved, but the action failed; nothing was changed / 已批准，但执行失败，未作更改",
               "approved, then failed / 已批准但执行失败"),
    "REFUSED": ("approved, but refused when it was about to run (the rules changed); nothing was done "
                "/ 已批准，但执行前被规则拒绝，未执行", "refused / 被拒绝执行"),
    "REJECTED": ("rejected; nothing was done / 已拒绝，未执行", "rejected / 已拒绝"),
    "EXPIRED": ("expired before anyone decided; nothing was done / 已过期，未执行", "expired / 已过期"),
    "CANCELLED": ("cancelled; nothing was done / 已取消，未执行", "cancelled / 已取消"),
    "SUPERSEDED": ("replaced by a newer request / 已被更新的请求替换", "replaced / 已替换"),
    "RESPONDED": ("answered with guidance instead of a decision; nothing was done / 审批人给出了指导意见，未执行",
                  "answered / 已回复"),
    "WITHDRAWN": ("withdrawn; nothing was done / 已撤回，未执行", "withdrawn / 已撤回"),
}

ARGUMENTS = {"amount": "Amount / 金额", "reason": "Reason / 原因", "order_id": "Order / 订单",
             "sku": "Product / 商品", "quantity": "Quantity / 数量", "currency": "Currency / 币种"}


def risk_words(risk: str) -> str:
    """"Critical / 极高" for "CRITICAL"; an unknown level humanized."""
    return RISK.get(str(risk), humanize(str(risk).lower()))


def outcome_words(outcome: str) -> tuple[str, str]:
    """(sentence, short word) for an outcome of approvals.selectors.outcome_of."""
    return OUTCOME.get(outcome, (humanize(outcome.lower()), humanize(outcome.lower())))


def argument_label(name: str) -> str:
    """"Amount / 金额" for "amount"; other argument names humanized ("ship_to" -> "Ship to")."""
    return ARGUMENTS.get(name, humanize(name))


def change_lines(changes: list[dict[str, Any]]) -> list[str]:
    """["  Amount / 金额: 30.00 → 20.00", ...] from an edit's masked changes [{"field", "from", "to"}]."""
    return [f"  {argument_label(c['field'])}: {fact_text(c.get('from'))} \u2192 {fact_text(c.get('to'))}"
            for c in changes]


def no_longer_needed(*, ending: str, outcome: str, decided_by: str) -> tuple[str, str]:
    """(English, Chinese) of why a request no longer needs an approver's decision.

    ending: approvals.signals ENDINGS (DECIDED, WITHDRAWN, EXPIRED, SUPERSEDED) or STOPPED (the
    tool was stopped); outcome: the
    request's (approvals.selectors.outcome_of); decided_by: the decider's display name."""
    if ending == "WITHDRAWN":
        return "withdrawn by the requester", "申请人已撤回"
    if ending == "EXPIRED":
        return "it expired before anyone decided", "已过期，无人审批"
    if ending == "SUPERSEDED":
        return "replaced by a newer request for the same action", "已被同一操作的更新请求替换"
    if ending == "STOPPED":
        return "an administrator stopped this tool, so nothing will run", "管理员已停用该工具，不会执行"
    verb, zh = {"REJECTED": ("rejected", "拒绝"), "RESPONDED": ("answered with guidance", "回复指导意见")} \
        .get(outcome, ("approved", "批准"))
    who = decided_by or "another approver"
    return f"decided by {who} ({verb})", f"已由 {decided_by or '其他审批人'} 决定（{zh}）"


def display_name(user) -> str:
    """What people read for a person: their full name, else their username ("" for None)."""
    if user is None:
        return ""
    return (user.get_full_name() or "").strip() or user.get_username()
