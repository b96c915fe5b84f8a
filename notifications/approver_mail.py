"""The emails to approvers, written from a request's document (notifications.content): asked to
decide, asked again after an edit, told it no longer needs them. Plain bilingual words, display
names and the tool's title; the only identifier is in the link (PLATFORM_BASE_URL)."""
from __future__ import annotations

from typing import Any

from notifications import wording
from notifications.content import fact_lines

PREFIX = "[agentplatform]"


def _request_lines(r: dict[str, Any]) -> list[str]:
    return [
        f"What / 内容: {r['summary']}",
        f"Tool / 工具: {r['tool_label']}",
        f"Risk / 风险: {r['risk_label']}",
        f"Approvals / 批准: {r['approvals']} of {r['quorum']} / 共需 {r['quorum']} 位，已有 {r['approvals']} 位",
        f"Requested by / 申请人: {r['requester_name']}",
        f"Expires / 截止: {r['expires_at'][:19].replace('T', ' ')} UTC",
    ]


def asked_email(body: dict[str, Any], *, again: bool = False, replaced: list[str] = ()) -> tuple[str, str]:
    """(subject, text) asking an approver to decide the request of `body`.

    again: it waits again under a stricter policy after it was approved. replaced: summaries of
    the older requests for the same action it replaced, which no longer need this approver."""
    r = body["request"]
    if again:
        subject = f"{PREFIX} Approval needed again / 再次待审批: {r['summary']}"
        head = ["The rules became stricter after this request was approved: it waits for your decision again. "
                "/ 该请求获批后规则变得更严格，再次等待您审批。"]
    elif replaced:
        subject = f"{PREFIX} Approval needed, replaces an earlier request / 待审批（替换先前请求）: {r['summary']}"
        head = ["A request waits for your decision. It replaces an earlier request for the same action, which "
                "no longer needs your decision. / 有一项请求等待您审批；它替换了同一操作的先前请求，先前的请求无需再审批。",
                *[f"  Replaced / 已替换: {summary}" for summary in replaced]]
    else:
        subject = f"{PREFIX} Approval needed / 待审批: {r['summary']}"
        head = ["A request waits for your decision. / 有一项请求等待您审批。"]
    lines = [*head, "", *_request_lines(r), *fact_lines(body), "", f"Decide here / 去审批: {r['url']}"]
    return subject[:200], "\n".join(lines) + "\n"


def revised_email(body: dict[str, Any]) -> tuple[str, str]:
    """(subject, text) telling an approver that the request of `body` was edited and needs their
    decision on the edited arguments: who edited it, what changed (old -> new, masked: body
    "changes" [{"field", "from", "to"}], "editor_name", "comment")."""
    r = body["request"]
    editor = body.get("editor_name") or "another approver"
    lines = [f"{editor} edited a request that waits for your decision. Decide the edited request; "
             "earlier approvals no longer count. / "
             f"{body.get('editor_name') or '其他审批人'} 修改了一项等待您审批的请求，请审批修改后的请求；此前的批准不再计数。",
             "", "What changed / 修改内容:", *wording.change_lines(body.get("changes") or [])]
    if body.get("comment"):
        lines.append(f"Comment / 说明: {body['comment']}")
    lines += ["", *_request_lines(r), *fact_lines(body), "", f"Decide here / 去审批: {r['url']}"]
    subject = f"{PREFIX} Edited, your approval is needed again / 已修改，需要您重新审批: {r['summary']}"
    return subject[:200], "\n".join(lines) + "\n"


def retracted_email(body: dict[str, Any]) -> tuple[str, str]:
    """(subject, text) telling an approver that the request of `body` no longer needs their
    decision and why (body "ending": approvals.signals ENDINGS; "replacement": {"summary", "url"}
    of the newer request when it was replaced)."""
    r = body["request"]
    why_en, why_zh = wording.no_longer_needed(ending=body.get("ending", ""), outcome=r["outcome"],
                                              decided_by=r["decided_by_name"])
    lines = [f"This request no longer needs your decision: {why_en}. / 此请求无需您再审批：{why_zh}。", "",
             f"What / 内容: {r['summary']}", f"Tool / 工具: {r['tool_label']}",
             f"Requested by / 申请人: {r['requester_name']}"]
    if r["reason"] and body.get("ending") == "DECIDED" and r["outcome"] in ("REJECTED", "RESPONDED"):
        lines.append(f"Their words / 决定说明: {r['reason']}")
    replacement = body.get("replacement")
    if replacement:
        lines += ["", f"The newer request / 新的请求: {replacement['summary']}", f"  {replacement['url']}"]
    lines += ["", f"See it here / 查看: {r['url']}"]
    subject = f"{PREFIX} No longer needs your decision / 无需再审批: {r['summary']}"
    return subject[:200], "\n".join(lines) + "\n"
