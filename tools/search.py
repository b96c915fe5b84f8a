"""Tool search for large catalogs.

When more tools are offered to a user than TOOL_SEARCH_THRESHOLD, the model is sent one
`tool_search` definition (plus the tools it already found in this run) instead of every
definition. A search runs over the tools *offered to this user in this tenant* only: the index is
built from that set and cached under (tenant, the offered names and versions), never shared
across tenants. Finding a tool grants nothing: its calls still pass the whole pipeline.

Ranking is lexical: Okapi BM25 over the tool's name (split on `_`/`-`), description and parameter
names and descriptions; English words are lower-cased and lightly stemmed, Chinese text is cut
into character bigrams (and single characters), so a query in either language matches.
bench/tool_search_recall.py measures recall@5 and the tokens saved.
"""
from __future__ import annotations

import json
import math
import re
import threading
from collections import Counter, OrderedDict
from typing import Any, Iterable

from core.text import loads_json

NAME = "tool_search"
_WORD = re.compile(r"[a-z0-9]+")
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]+")
_STOP = frozenset("a an the of to for in on and or is are be it this that with by from as at my me i you your "
                  "please can could would want need what which how do does show get".split())


def definition() -> dict[str, Any]:
    """The `tool_search` ToolDefinition in OpenAI's wire format."""
    return {"type": "function", "function": {
        "name": NAME,
        "description": ("Find the tools you may use for a task when they are not listed yet. Give a short "
                        "description of what you want to do (English or Chinese); the best matching tools are "
                        "returned with their parameters and become callable."),
        "parameters": {"type": "object", "additionalProperties": False, "required": ["query"],
                       "properties": {"query": {"type": "string", "minLength": 1, "maxLength": 500,
                                                "description": "What you want to do, in a few words."}}}}}


def _stem(word: str) -> str:
    for suffix in ("ies", "ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)] + ("y" if suffix == "ies" else "")
    return word


# What users and tool authors call the same few actions, in both languages: each form found adds
# the action's canonical term (expansion, the words themselves stay), so "call off" and "撤销"
# meet "Cancel". General verbs of business tools only; nouns are left to the descriptions.
_ACTIONS = {
    "create": r"\bcreate\b|\bnew\b|\badd\b|\bopen a\b|\bregister\b|\bset up\b|\bsubmit\b|新建|创建|新增|添加|登记|提交",
    "get": r"\bget\b|\blook up\b|\bdetails?\b|\bstatus of\b|\bview\b|\bcheck\b|\bwhere is\b|查看|详情|查一下|查询|状态",
    "list": r"\blist\b|\ball\b|\bevery\b|\bwhich\b|\bsearch\b|\bfind\b|\bfilter\b|列出|所有|哪些|列表|筛选",
    "update": r"\bupdate\b|\bchange\b|\bedit\b|\bmodify\b|\bfix\b|\bcorrect\b|修改|更改|更新|编辑|更正",
    "cancel": r"\bcancel|\bwithdraw|\bcall off\b|\bstop\b|\brevoke\b|\babort\b|取消|撤销|撤回|作废",
    "delete": r"\bdelete\b|\bremove\b|删除|移除",
    "approve": r"\bapprove|\bsign off\b|批准|审批|同意",
    "export": r"\bexport\b|\bdownload\b|导出|下载",
}
_ACTION_FORMS = [(re.compile(pattern), f"@{name}") for name, pattern in _ACTIONS.items()]


def tokens(text: str) -> list[str]:
    """Index terms of `text`: stemmed lower-case English words (stop words dropped), Chinese
    characters and character bigrams, and the canonical term of each action verb it uses."""
    text = text.lower().replace("_", " ").replace("-", " ")
    out = [term for pattern, term in _ACTION_FORMS if pattern.search(text)]
    out += [_stem(w) for w in _WORD.findall(text) if w not in _STOP]
    for run in _CJK.findall(text):
        out.extend(run)
        out.extend(run[i:i + 2] for i in range(len(run) - 1))
    return out


def _document(tool_definition: dict[str, Any]) -> list[str]:
    function = tool_definition["function"]
    parts = [function["name"], function["name"], function.get("description") or ""]
    for name, prop in ((function.get("parameters") or {}).get("properties") or {}).items():
        parts.append(name)
        if isinstance(prop, dict):
            parts.append(str(prop.get("description") or ""))
    return tokens(" ".join(parts))


class ToolIndex:
    """A BM25 index over a fixed list of tool definitions (k1=1.2, b=0.75)."""

    def __init__(self, definitions: Iterable[dict[str, Any]]) -> None:
        self.definitions = list(definitions)
        self.docs = [Counter(_document(d)) for d in self.definitions]
        self.lengths = [sum(doc.values()) for doc in self.docs]
        self.average = (sum(self.lengths) / len(self.lengths)) if self.lengths else 1.0
        frequency: Counter[str] = Counter()
        for doc in self.docs:
            frequency.update(doc.keys())
        n = len(self.docs)
        self.idf = {term: math.log(1 + (n - df + 0.5) / (df + 0.5)) for term, df in frequency.items()}

    def search(self, query: str, *, limit: int = 5) -> list[dict[str, Any]]:
        """The definitions of the `limit` best matches of `query`, best first (no score > 0: none)."""
        terms = tokens(query)
        scored = []
        for i, doc in enumerate(self.docs):
            score = 0.0
            norm = 1.2 * (1 - 0.75 + 0.75 * self.lengths[i] / self.average)
            for term in terms:
                tf = doc.get(term)
                if tf:
                    score += self.idf[term] * tf * 2.2 / (tf + norm)
            if score > 0:
                scored.append((score, i))
        scored.sort(key=lambda pair: (-pair[0], self.definitions[pair[1]]["function"]["name"]))
        return [self.definitions[i] for _, i in scored[:limit]]


_CACHE: "OrderedDict[tuple, ToolIndex]" = OrderedDict()
_LOCK = threading.Lock()


def index_for(*, tenant_id: int, offered: dict[str, tuple[Any, Any]], definitions: dict[str, dict[str, Any]]) -> ToolIndex:
    """The index of exactly the tools offered (name -> (spec, row)), cached per tenant and offered
    set (names and versions): two users with the same offered set in one tenant share it, nothing
    is shared across tenants or with a user offered other tools. definitions: name -> definition."""
    key = (tenant_id, tuple(sorted((name, getattr(row, "version", ""), getattr(row, "description", ""))
                                   for name, (_, row) in offered.items())))
    with _LOCK:
        index = _CACHE.get(key)
        if index is not None:
            _CACHE.move_to_end(key)
            return index
    index = ToolIndex(definitions[name] for name in sorted(offered))
    with _LOCK:
        _CACHE[key] = index
        while len(_CACHE) > 64:
            _CACHE.popitem(last=False)
    return index


def parse_query(arguments: Any) -> str | None:
    """The query of a tool_search call's raw arguments, or None when they are not {"query": str}."""
    try:
        parsed = loads_json(arguments) if isinstance(arguments, str) else None
    except ValueError:
        return None
    if not isinstance(parsed, dict) or set(parsed) != {"query"} or not isinstance(parsed["query"], str):
        return None
    query = parsed["query"].strip()
    return query[:500] if query else None


def discovered_in(messages: list[dict[str, Any]]) -> set[str]:
    """Names of the tools a run's earlier tool_search calls returned (from its tool messages), so
    a resumed run keeps offering what it found."""
    search_ids = {c.get("id") for m in messages if m.get("role") == "assistant"
                  for c in (m.get("tool_calls") or []) if (c.get("function") or {}).get("name") == NAME}
    found: set[str] = set()
    for message in messages:
        if message.get("role") != "tool" or message.get("tool_call_id") not in search_ids:
            continue
        try:
            data = json.loads(message.get("content") or "{}").get("data") or {}
        except (ValueError, AttributeError):
            continue
        found.update(t.get("name") for t in data.get("tools") or [] if isinstance(t, dict) and t.get("name"))
    return found
