"""What people read when a limit over history is exceeded (policies.limits): the limit, the key,
the window and the cap, in English and Chinese, with the limit's own `reason` first."""
from __future__ import annotations

from decimal import Decimal

from policies.documents import Limit

_ZERO = Decimal("0")


def _window_words(seconds: int) -> tuple[str, str]:
    for unit, zh, size in (("day", "天", 86400), ("hour", "小时", 3600), ("minute", "分钟", 60)):
        if seconds % size == 0:
            n = seconds // size
            return f"{n} {unit}{'s' if n != 1 else ''}", f"{n} {zh}"
    return f"{seconds} seconds", f"{seconds} 秒"


def _per_words(limit: Limit, key: str) -> tuple[str, str]:
    if limit.per == "tenant":
        return "for the whole tenant", "整个租户"
    if limit.per == "user":
        return "per requester", "每位申请人"
    return f"per {limit.per} ({key})", f"每个 {limit.per}（{key}）"


def limit_message(limit: Limit, key: str, count: int, total: Decimal, amount: Decimal | None, exceeded: str) -> str:
    """The words of one exceeded limit: `key` as the call spelt it, `count` / `total` what was
    already counted in the window, `amount` this call's value of the max_sum argument, `exceeded`
    "count", "sum" or "count+sum". At most 1,000 characters."""
    window, window_zh = _window_words(limit.window_seconds)
    per, per_zh = _per_words(limit, key)
    en, zh = [], []
    if "count" in exceeded:
        en.append(f"at most {limit.max_count} call(s) of {limit.tool} {per} within {window}; "
                  f"{count} already counted")
        zh.append(f"{per_zh}在 {window_zh} 内最多调用 {limit.tool} {limit.max_count} 次，已计 {count} 次")
    if "sum" in exceeded and limit.max_sum is not None:
        arg, cap = limit.max_sum.argument, limit.max_sum.value
        en.append(f"at most {cap} of {arg} {per} within {window}; {total} already counted, this call adds "
                  f"{amount or _ZERO}")
        zh.append(f"{per_zh}在 {window_zh} 内 {arg} 合计不超过 {cap}，已计 {total}，本次 {amount or _ZERO}")
    text = f"limit {limit.id}: {'; '.join(en)} / 限额 {limit.id}：{'；'.join(zh)}"
    if limit.reason:
        text = f"{limit.reason} ({text})"
    return text[:1000]
