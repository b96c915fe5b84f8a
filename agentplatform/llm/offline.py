"""The offline model: a deterministic planner behind an httpx2 transport that speaks chat completions.

This is a demo and test double, not AI: it lets the platform run and be tested with no model
endpoint at all. With no `LLM_API_KEY` the SDK client
sends its requests to `OfflineModelTransport`, which answers `POST /v1/chat/completions` in the
real wire format, as JSON or as an SSE stream, so the platform runs the same code with or without
a network.

`plan()` is deliberately naive:

- It proposes tool calls by *intent* found in the latest user message, even for tools that are
  NOT in the offered `tools` list. It does not know who the user is or what they may do; the
  platform's governance pipeline must refuse calls to tools that were not offered
  (TOOL_NOT_FOUND / PERMISSION_DENIED). Tests rely on this to exercise those refusals.
- It plans tool calls only when the last message is a user message; after tool results it always
  writes a final answer, so it can never loop on its own results.
- It never repeats anything shaped like a confirmation token (`ct_...`), in text or arguments.
"""
from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterator
from typing import Any

import httpx2

from agentplatform.llm.offline_answers import TRACK_TOOL, answer_from_results, text_of
from core.redaction.text import redact_tokens

MODEL_NAME = "offline-planner"

_CJK = re.compile(r"[\u3400-\u9fff]")
_SKU = re.compile(r"SKU-\d{5}")
_WAREHOUSE = re.compile(r"WH-[A-Z]{2}-\d{2}")
_ORDER = re.compile(r"A\d{12}")
_CANCEL = re.compile(r"\bcancel\b|取消", re.I)
_REFUND = re.compile(r"\brefund\b|退款", re.I)
_LIST = re.compile(r"\blist\b|\bshow\b[\w\s]*\borders\b|订单列表|列出|所有订单|哪些订单", re.I)
_ORDERS_WORD = re.compile(r"\borders\b|订单", re.I)
_REASON = re.compile(r"(?:\bbecause(?:\s+of)?\b|\breason\s*(?:is\b|[:：])|\bdue\s+to\b|因为|原因\s*(?:是|[:：])?)\s*(.+)",
                     re.I | re.S)
_REASON_END = re.compile(r"[.;!?。；！？\n]|\s+and\s+(?:check|cancel|refund|list|show)\b|并且|然后|，(?:再|并|然后)")
_AMOUNT = re.compile(r"(?:\bamount(?:\s+of)?|\brefund(?:ing)?|退款|金额)\s*[:：]?\s*[$¥￥]?\s*(\d+(?:\.\d{1,2})?)(?!\d)",
                     re.I)
# A parcel's tracking number, for the demo's remote tool (TRACK_TOOL).
_TRACKING = re.compile(r"\b(?:SF|YT)\d{10}\b")
_STATUSES = (
    (re.compile(r"\bshipped\b|已发货", re.I), "SHIPPED"),
    (re.compile(r"\bcompleted\b|已完成", re.I), "COMPLETED"),
    (re.compile(r"\bcancell?ed\b|已取消", re.I), "CANCELLED"),
    (re.compile(r"\brefunded\b|已退款", re.I), "REFUNDED"),
    (re.compile(r"\bpaid\b|已支付|已付款|待发货", re.I), "PAID"),
)

# What the planner can do, one phrase per tool (English, Chinese); the help text names only the
# tools offered in this run, so it never suggests what the person cannot use.
_HELP_PARTS = (
    ("query_inventory", "check stock (\"stock of SKU-10001 in WH-HZ-01\")", "查询库存（“查询 SKU-10001 在 WH-HZ-01 的库存”）"),
    ("list_orders", "list orders (\"list shipped orders\")", "列出订单（“列出已发货的订单”）"),
    ("cancel_order", "cancel an order (\"cancel A202607290001 because the customer changed their mind\")",
     "取消订单（“取消订单 A202607290001，原因：客户不想要了”）"),
    ("refund_order", "refund one (\"refund A202607290001 amount 12.50 because it arrived damaged\")",
     "退款（“订单 A202607290001 退款 12.5，原因：商品损坏”）"),
)


def _help(offered: set[str], chinese: bool) -> str:
    """The help text, naming what the offered tools can do (all of it when `offered` is empty: the
    caller did not say)."""
    parts = [(en, zh) for name, en, zh in _HELP_PARTS if not offered or name in offered]
    if not parts:
        return ("我是离线演示规划器，不是真正的模型。目前没有向您提供可用的操作，请联系管理员。" if chinese else
                "I'm the offline demo planner, not a real model. No actions are offered to you here; "
                "ask your administrator.")
    if chinese:
        return "我是离线演示规划器，不是真正的模型。我可以：" + "、".join(zh for _, zh in parts) + "。"
    return "I'm the offline demo planner, not a real model. I can: " + ", ".join(en for en, _ in parts) + "."


def _latest_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return text_of(message)
    return ""


def _reason(text: str, chinese: bool) -> str:
    match = _REASON.search(text)
    reason = _REASON_END.split(match.group(1), maxsplit=1)[0] if match else ""
    reason = redact_tokens(reason.strip(" ,，:：\"'“”"), placeholder="[redacted]", any_length=True)
    return reason or ("客户要求" if chinese else "customer request")


def _order_intents(text: str) -> list[tuple[str, str]]:
    """Pair each order id with the nearest cancel/refund keyword before it (else after it)."""
    keywords = sorted([(m.start(), "cancel_order") for m in _CANCEL.finditer(text)]
                      + [(m.start(), "refund_order") for m in _REFUND.finditer(text)])
    pairs: list[tuple[str, str]] = []
    for match in _ORDER.finditer(text):
        before = [name for pos, name in keywords if pos < match.start()]
        after = [name for pos, name in keywords if pos > match.start()]
        name = before[-1] if before else (after[0] if after else None)
        if name and (name, match.group()) not in pairs:
            pairs.append((name, match.group()))
    return pairs


def _intents(text: str) -> list[tuple[str, dict[str, Any]]]:
    """(tool name, arguments) for every intent in one user message, in a stable order."""
    chinese = bool(_CJK.search(text))
    calls: list[tuple[str, dict[str, Any]]] = []
    warehouse = _WAREHOUSE.search(text)
    for sku in dict.fromkeys(_SKU.findall(text)):
        args: dict[str, Any] = {"sku": sku}
        if warehouse:
            args["warehouse_code"] = warehouse.group()
        calls.append(("query_inventory", args))
    wants_list = bool(_LIST.search(text)) or (
        bool(_ORDERS_WORD.search(text)) and not _ORDER.search(text) and not _SKU.search(text))
    if wants_list:
        status = next((value for pattern, value in _STATUSES if pattern.search(text)), None)
        calls.append(("list_orders", {"status": status} if status else {}))
    for number in dict.fromkeys(_TRACKING.findall(text)):
        calls.append((TRACK_TOOL, {"tracking_number": number}))
    for name, order_id in _order_intents(text):
        args = {"order_id": order_id, "reason": _reason(text, chinese)}
        if name == "refund_order":
            amount = _AMOUNT.search(text)
            if amount:
                args = {"order_id": order_id, "amount": float(amount.group(1)), "reason": args["reason"]}
        calls.append((name, args))
    return calls


def _call_id(messages: list[dict[str, Any]], index: int, name: str) -> str:
    # Position in the conversation + index: deterministic, and unique within one conversation.
    basis = f"{len(messages)}:{index}:{name}:{_latest_user_text(messages)}"
    return "call_" + hashlib.sha1(basis.encode()).hexdigest()[:24]


def plan(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
    """Return the next assistant message for `messages`, in chat-completions format.

    messages: the conversation so far. tools: the offered definitions; IGNORED on purpose (see
    the module docstring: calls are proposed by intent, and governance must refuse unoffered ones),
    except by the help text, which names only what they can do.
    Returns {"role": "assistant", "content": str | None, "tool_calls"?: [{"id", "type": "function",
    "function": {"name", "arguments": JSON str}}]}. After tool results: a final answer in the user's
    language (Chinese when the latest user message has CJK characters). After a user message: tool
    calls for every intent found, else a help text. Anything else: the help text. Raises nothing.
    """
    # A naive planner: it proposes by intent whatever it was offered; only its help follows `tools`.
    offered = {str((t.get("function") or {}).get("name") or "") for t in tools if isinstance(t, dict)}
    user_text = _latest_user_text(messages)
    chinese = bool(_CJK.search(user_text))
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        return {"role": "assistant", "content": answer_from_results(messages, chinese=chinese)}
    intents = _intents(user_text) if last.get("role") == "user" else []
    if not intents:
        return {"role": "assistant", "content": _help(offered, chinese)}
    tool_calls = [
        {"id": _call_id(messages, i, name), "type": "function",
         "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}
        for i, (name, args) in enumerate(intents)
    ]
    return {"role": "assistant", "content": None, "tool_calls": tool_calls}


# -- the wire format ------------------------------------------------------------------------------

def _usage(messages: list[dict[str, Any]], message: dict[str, Any]) -> dict[str, int]:
    # Fake but plausible token counts: about four characters per token.
    prompt = sum(len(text_of(m)) for m in messages) // 4 + 1
    completion = len(json.dumps(message, ensure_ascii=False)) // 4 + 1
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _halves(text: str) -> list[str]:
    """Split `text` into at least two non-empty pieces (when it has two characters), like a provider does."""
    if len(text) < 2:
        return [text]
    step = max(1, len(text) // 3)
    return [text[i:i + step] for i in range(0, len(text), step)]


def _chunks(completion_id: str, created: int, message: dict[str, Any], finish_reason: str) -> Iterator[dict[str, Any]]:
    base = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": MODEL_NAME,
            "system_fingerprint": "fp_offline"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    yield chunk({"role": "assistant", "content": ""})
    # Text in about three deltas, not one per word: each chunk costs the SDK a model object and the
    # caller a hand-over between threads (docs/performance.md); a stream of several deltas is kept.
    for piece in _halves(message.get("content") or ""):
        if piece:
            yield chunk({"content": piece})
    for index, call in enumerate(message.get("tool_calls") or ()):
        function = call["function"]
        yield chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                     "function": {"name": function["name"], "arguments": ""}}]})
        for piece in _halves(function["arguments"]):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, finish_reason)


class OfflineModelTransport(httpx2.BaseTransport):
    """An in-process httpx2 transport that answers `POST .../chat/completions` with `plan()`.

    Non-streaming requests get a `chat.completion` JSON body; `"stream": true` gets an SSE body of
    `chat.completion.chunk` objects (`data: {...}\\n\\n` ... `data: [DONE]\\n\\n`), with every tool
    call's arguments split over at least two chunks and a usage chunk when
    `stream_options.include_usage` is set. Other paths get a 404 in OpenAI's error format, a body
    that is not JSON a 400. Never touches the network.
    """

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        """Answer one request. Returns an httpx2.Response; raises nothing for bad input."""
        if request.method != "POST" or not request.url.path.endswith("/chat/completions"):
            return self._error(404, f"Unknown request URL: {request.method} {request.url.path}", "invalid_request_error")
        try:
            body = json.loads(request.read() or b"{}")
            messages = list(body["messages"])
        except (ValueError, KeyError, TypeError):
            return self._error(400, "The body must be JSON with a 'messages' list.", "invalid_request_error")
        message = plan(messages, body.get("tools") or [])
        finish_reason = "tool_calls" if message.get("tool_calls") else "stop"
        created = int(time.time())
        digest = hashlib.sha1(json.dumps(messages, sort_keys=True, default=str).encode()).hexdigest()[:24]
        completion_id = f"chatcmpl-offline{digest}"
        usage = _usage(messages, message)
        if not body.get("stream"):
            payload = {"id": completion_id, "object": "chat.completion", "created": created, "model": MODEL_NAME,
                       "system_fingerprint": "fp_offline",
                       "choices": [{"index": 0, "message": {**message, "refusal": None}, "logprobs": None,
                                    "finish_reason": finish_reason}],
                       "usage": usage}
            return httpx2.Response(200, json=payload, request=request)
        chunks = list(_chunks(completion_id, created, message, finish_reason))
        if (body.get("stream_options") or {}).get("include_usage"):
            chunks.append({"id": completion_id, "object": "chat.completion.chunk", "created": created,
                           "model": MODEL_NAME, "choices": [], "usage": usage})
        lines = [f"data: {json.dumps(c, ensure_ascii=False)}\n\n".encode() for c in chunks]
        lines.append(b"data: [DONE]\n\n")
        return httpx2.Response(200, headers={"content-type": "text/event-stream; charset=utf-8"},
                               content=iter(lines), request=request)

    @staticmethod
    def _error(status: int, message: str, kind: str) -> httpx2.Response:
        return httpx2.Response(status, json={"error": {"message": message, "type": kind, "param": None,
                                                       "code": None}})
