"""Recall of tool search on a large catalog: the tool a request needs must be among those found.

A generated catalog of 360 tools (12 business systems x 6 objects x 5 actions, names such as
`hr_cancel_leave_request`, descriptions in English, half of them also in Chinese) and 100
labelled requests written the way users ask (40 in Chinese, with synonyms the descriptions do not
use, e.g. "vacation application" for a leave request), each naming the one tool that serves it.
The index is tools.search.ToolIndex (BM25, the one the runtime uses); the script prints recall@1,
recall@5 and the tokens sent to the model per model call: every definition against `tool_search`
plus the five it returns. Tokens are estimated (no tokenizer is installed): one token per four
non-Chinese characters of the compact JSON, one per Chinese character.

Needs no database. Usage: python bench/tool_search_recall.py [--verbose]
"""
from __future__ import annotations

import argparse
import json
import math
import random
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.search import ToolIndex, definition as search_definition  # noqa: E402

# system: (label, Chinese label, objects: [(object, English phrase, Chinese phrase, user synonyms EN, ZH)])
SYSTEMS = {
    "crm": ("CRM", "客户管理系统", [
        ("contact", "customer contact", "客户联系人", ["client contact person", "customer's contact details"], ["客户联系方式"]),
        ("lead", "sales lead", "销售线索", ["prospect", "potential customer"], ["潜在客户"]),
        ("opportunity", "sales opportunity", "商机", ["deal in the pipeline", "sales deal"], ["销售机会"]),
        ("account", "customer account", "客户账户", ["client company record"], ["客户档案"]),
        ("visit", "customer visit record", "客户拜访记录", ["sales call report", "client meeting notes"], ["拜访记录"]),
        ("complaint", "customer complaint", "客户投诉", ["client grievance", "unhappy customer report"], ["投诉单"]),
    ]),
    "hr": ("HR system", "人力资源系统", [
        ("leave_request", "leave request", "请假申请", ["vacation application", "time off request"], ["休假申请"]),
        ("employee", "employee profile", "员工档案", ["staff member record", "worker details"], ["员工信息"]),
        ("payslip", "payslip", "工资条", ["salary statement", "pay stub"], ["薪资单"]),
        ("job_posting", "job posting", "招聘职位", ["open position", "vacancy ad"], ["招聘岗位"]),
        ("training", "training course enrollment", "培训报名", ["course sign-up", "learning session registration"], ["培训课程"]),
        ("overtime", "overtime record", "加班记录", ["extra hours worked", "overtime hours"], ["加班时长"]),
    ]),
    "finance": ("finance system", "财务系统", [
        ("invoice", "invoice", "发票", ["bill sent to a customer", "billing document"], ["开票记录"]),
        ("expense_claim", "expense claim", "费用报销", ["reimbursement request", "travel expenses"], ["报销单"]),
        ("payment", "supplier payment", "供应商付款", ["vendor payout", "paying a supplier"], ["付款单"]),
        ("budget", "department budget", "部门预算", ["spending plan", "cost center budget"], ["预算额度"]),
        ("ledger_entry", "general ledger entry", "总账分录", ["accounting journal line", "bookkeeping entry"], ["会计凭证"]),
        ("tax_report", "tax report", "税务报表", ["VAT return", "tax filing"], ["纳税申报"]),
    ]),
    "inventory": ("warehouse system", "仓储系统", [
        ("stock_level", "stock level of a SKU", "库存数量", ["how many units are on hand", "available quantity"], ["存货余量"]),
        ("transfer", "stock transfer between warehouses", "调拨单", ["moving goods to another warehouse"], ["仓间调拨"]),
        ("stocktake", "stocktake count", "盘点任务", ["inventory count", "cycle count"], ["库存盘点"]),
        ("reorder_rule", "reorder rule", "补货规则", ["replenishment threshold", "minimum stock rule"], ["补货阈值"]),
        ("batch", "product batch", "批次", ["lot number", "production lot"], ["生产批号"]),
        ("damaged_goods", "damaged goods report", "货损报告", ["broken items", "goods damaged in storage"], ["破损商品"]),
    ]),
    "orders": ("order system", "订单系统", [
        ("order", "sales order", "销售订单", ["purchase a customer made", "customer order"], ["客户订单"]),
        ("refund", "order refund", "订单退款", ["money back to the customer", "reimburse the buyer"], ["退钱"]),
        ("return", "product return", "退货申请", ["send an item back", "RMA"], ["退货单"]),
        ("coupon", "discount coupon", "优惠券", ["promo code", "voucher"], ["折扣码"]),
        ("cart", "shopping cart", "购物车", ["basket", "items not yet checked out"], ["待结算商品"]),
        ("subscription", "subscription plan", "订阅套餐", ["recurring plan", "membership renewal"], ["会员订阅"]),
    ]),
    "logistics": ("logistics system", "物流系统", [
        ("shipment", "shipment", "运单", ["parcel", "delivery in transit"], ["包裹", "快递"]),
        ("pickup", "courier pickup", "上门取件", ["collection by the carrier", "courier collection"], ["快递员取件"]),
        ("route", "delivery route", "配送路线", ["driver's route", "delivery path"], ["送货路线"]),
        ("carrier_rate", "carrier rate", "运费报价", ["shipping cost quote", "freight price"], ["运费"]),
        ("customs_declaration", "customs declaration", "报关单", ["export clearance papers", "import declaration"], ["清关"]),
        ("vehicle", "delivery vehicle", "配送车辆", ["truck", "van of the fleet"], ["货车"]),
    ]),
    "support": ("helpdesk", "客服工单系统", [
        ("ticket", "support ticket", "客服工单", ["helpdesk case", "customer issue"], ["服务单"]),
        ("faq", "FAQ article", "常见问题", ["knowledge base page", "help article"], ["帮助文档"]),
        ("sla", "service level agreement", "服务等级协议", ["response time target", "SLA breach"], ["响应时限"]),
        ("survey", "satisfaction survey", "满意度调查", ["CSAT score", "customer feedback form"], ["客户评价"]),
        ("escalation", "escalation", "升级处理", ["hand over to a senior agent", "raise priority of a case"], ["问题升级"]),
        ("chat_transcript", "chat transcript", "聊天记录", ["conversation log with a customer"], ["对话记录"]),
    ]),
    "marketing": ("marketing platform", "营销平台", [
        ("campaign", "marketing campaign", "营销活动", ["promotion", "ad campaign"], ["促销活动"]),
        ("newsletter", "email newsletter", "邮件简报", ["mailing to subscribers", "email blast"], ["群发邮件"]),
        ("audience", "audience segment", "目标人群", ["customer segment", "target group"], ["客群"]),
        ("banner", "website banner", "网站横幅", ["homepage ad image", "hero image"], ["首页广告"]),
        ("sms_message", "SMS message", "短信", ["text message to customers", "mobile text"], ["短信通知"]),
        ("landing_page", "landing page", "落地页", ["campaign web page", "signup page"], ["活动页面"]),
    ]),
    "it": ("IT service desk", "IT服务台", [
        ("password_reset", "password reset", "密码重置", ["forgot my login", "locked out of my account"], ["忘记密码"]),
        ("laptop", "laptop assignment", "笔记本电脑分配", ["company computer", "notebook for a new hire"], ["电脑"]),
        ("vpn_access", "VPN access", "VPN权限", ["remote network access", "connect from home"], ["远程访问"]),
        ("software_license", "software license", "软件许可证", ["seat for an application", "license key"], ["软件授权"]),
        ("incident", "IT incident", "IT故障", ["outage", "system is down"], ["系统故障"]),
        ("mailbox", "email mailbox", "邮箱", ["email account", "shared inbox"], ["企业邮箱"]),
    ]),
    "legal": ("legal system", "法务系统", [
        ("contract", "contract", "合同", ["agreement", "signed deal paperwork"], ["协议"]),
        ("nda", "non-disclosure agreement", "保密协议", ["NDA", "confidentiality agreement"], ["保密条款"]),
        ("trademark", "trademark filing", "商标申请", ["brand registration", "logo protection"], ["商标注册"]),
        ("litigation", "litigation case", "诉讼案件", ["lawsuit", "court case"], ["官司"]),
        ("policy_document", "compliance policy", "合规制度", ["internal rules", "code of conduct"], ["规章制度"]),
        ("data_request", "personal data request", "个人数据请求", ["GDPR request", "right to be forgotten"], ["数据删除请求"]),
    ]),
    "procurement": ("procurement system", "采购系统", [
        ("purchase_order", "purchase order", "采购订单", ["PO", "order placed with a vendor"], ["采购单"]),
        ("supplier", "supplier", "供应商", ["vendor", "seller we buy from"], ["供货商"]),
        ("quotation", "supplier quotation", "供应商报价", ["price quote from a vendor", "bid"], ["报价单"]),
        ("requisition", "purchase requisition", "请购单", ["request to buy something", "buying request"], ["采购申请"]),
        ("goods_receipt", "goods receipt", "收货单", ["delivery received from a vendor", "incoming goods check"], ["到货验收"]),
        ("tender", "tender", "招标", ["RFP", "request for proposals"], ["投标"]),
    ]),
    "analytics": ("analytics platform", "数据分析平台", [
        ("sales_report", "sales report", "销售报表", ["revenue figures", "how much we sold"], ["销售额"]),
        ("dashboard", "dashboard", "数据看板", ["KPI board", "metrics overview"], ["指标面板"]),
        ("forecast", "demand forecast", "需求预测", ["prediction of next month's demand", "projection"], ["销量预测"]),
        ("churn_score", "churn risk score", "流失风险评分", ["customers likely to leave", "attrition risk"], ["客户流失"]),
        ("funnel", "conversion funnel", "转化漏斗", ["drop-off between steps", "conversion rate"], ["转化率"]),
        ("cohort", "cohort analysis", "留存分析", ["retention by signup month"], ["用户留存"]),
    ]),
}
# action: (English verb for descriptions, Chinese verb, how users say it EN, ZH)
ACTIONS = {
    "list": ("List and filter", "查询列表", ["show me all", "pull up every", "which are the"], ["列出所有", "查一下有哪些"]),
    "get": ("Get the details of one", "查看详情", ["look up the", "what is the status of the", "details of the"],
            ["查看", "帮我查一下这个"]),
    "create": ("Create a new", "新建", ["open a new", "register a new", "set up a"], ["新建一个", "帮我创建"]),
    "update": ("Update or correct an existing", "修改", ["change the", "edit the", "fix a mistake in the"],
               ["修改一下", "更改"]),
    "cancel": ("Cancel or withdraw a", "取消", ["call off the", "withdraw the", "stop the"], ["取消", "撤销"]),
}


def catalog() -> list[dict]:
    """The generated catalog: OpenAI tool definitions (name, description, JSON Schema)."""
    tools, count = [], 0
    for system, (label, zh_label, objects) in SYSTEMS.items():
        for obj, phrase, zh_phrase, _, _ in objects:
            for action, (verb, zh_verb, _, _) in ACTIONS.items():
                count += 1
                description = f"{verb} {phrase} in the {label}."
                if action == "list":
                    description += " Supports paging, date ranges and status filters."
                elif action in ("create", "update", "cancel"):
                    description += " Changes data; the platform asks for confirmation."
                if count % 2 == 0:
                    description += f" {zh_verb}{zh_phrase}（{zh_label}）。"
                properties = {"page": {"type": "integer", "minimum": 1}} if action == "list" else \
                    {f"{obj}_id": {"type": "string", "description": f"Identifier of the {phrase}."}}
                if action in ("create", "update"):
                    properties["fields"] = {"type": "object", "description": f"Values of the {phrase}."}
                if action == "cancel":
                    properties["reason"] = {"type": "string", "description": "Why, in a sentence."}
                tools.append({"type": "function", "function": {
                    "name": f"{system}_{action}_{obj}", "description": description,
                    "parameters": {"type": "object", "properties": properties, "required": sorted(properties)[:1],
                                   "additionalProperties": False}}})
    return tools


def requests(rng: random.Random) -> list[tuple[str, str]]:
    """100 labelled requests: (text, the tool that serves it, "catalog words" when it names the
    object as the description does, else "synonym"); 40 in Chinese."""
    keys = [(system, action, entry) for system, (_, _, objects) in SYSTEMS.items()
            for entry in objects for action in ACTIONS]
    chosen = rng.sample(keys, 100)
    out = []
    for i, (system, action, (obj, phrase, zh_phrase, synonyms, zh_synonyms)) in enumerate(chosen):
        _, _, said, zh_said = ACTIONS[action]
        label = f"{system}_{action}_{obj}"
        if i % 5 in (1, 3):  # Chinese
            thing = rng.choice(zh_synonyms + [zh_phrase])
            out.append((f"{rng.choice(zh_said)}{thing}", label, "catalog words" if thing == zh_phrase else "synonym"))
        else:
            thing = rng.choice(synonyms + [phrase])
            tail = rng.choice(["", " for customer 1042", " from last week", " please", " in Hangzhou"])
            out.append((f"{rng.choice(said)} {thing}{tail}", label, "catalog words" if thing == phrase else "synonym"))
    return out


_CJK = re.compile(r"[\u3400-\u9fff\uff00-\uffef\u3000-\u303f]")


def tokens(value) -> int:
    """Estimated tokens of a JSON value sent to the model (see the module docstring)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    cjk = len(_CJK.findall(text))
    return math.ceil((len(text) - cjk) / 4) + cjk


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true", help="print every miss")
    args = parser.parse_args()
    tools = catalog()
    labelled = requests(random.Random(14))
    index = ToolIndex(tools)
    hits1 = hits5 = 0
    sent = []
    groups: dict[str, list[bool]] = {}
    described_in_chinese = {t["function"]["name"] for t in tools if _CJK.search(t["function"]["description"])}
    for text, label, wording in labelled:
        found = index.search(text, limit=5)
        names = [d["function"]["name"] for d in found]
        hits1 += bool(names) and names[0] == label
        hits5 += label in names
        language = "Chinese" if _CJK.search(text) else "English"
        if language == "Chinese":
            language += ", tool described in Chinese too" if label in described_in_chinese else ", English-only tool"
        groups.setdefault(f"{language}, {wording}", []).append(label in names)
        sent.append(tokens([search_definition()] + found))
        if args.verbose and label not in names:
            print(f"miss: {text!r} -> want {label}, got {names}")
    everything = tokens(tools)
    chinese = sum(1 for text, _, _ in labelled if _CJK.search(text))
    print(f"catalog: {len(tools)} tools; requests: {len(labelled)} ({chinese} in Chinese)")
    print(f"recall@1 {hits1 / len(labelled):.2f}   recall@5 {hits5 / len(labelled):.2f}")
    for group, hits in sorted(groups.items()):
        print(f"  recall@5 {sum(hits) / len(hits):.2f}  ({sum(hits)}/{len(hits)})  {group}")
    print(f"tokens per model call: all definitions {everything:,}; tool_search + top 5 "
          f"{sum(sent) / len(sent):,.0f} on average (max {max(sent):,}): "
          f"{everything - sum(sent) / len(sent):,.0f} saved ({1 - sum(sent) / len(sent) / everything:.1%})")


if __name__ == "__main__":
    main()
