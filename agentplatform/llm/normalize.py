"""Every provider shape becomes one canonical assistant turn here, and only what a provider accepts
is replayed from here: the one module that knows how OpenAI-compatible providers bend the
chat-completions format (the table of shapes is docs/providers.md).

OpenAI-compatible providers bend the chat-completions format. Before governance sees a turn:

- its tool calls are made canonical by `agentplatform.llm.call_shapes` (unique ids, phantom and
  repeated entries dropped, object arguments serialised, arguments that say nothing read as "{}",
  unstorable characters escaped in arguments);
- text PostgreSQL cannot store (NUL, lone surrogates; `core.text`) is cleaned in free text
  (content, reasoning, names, ids);
- provider reasoning (`reasoning_content`) is kept on the turn, apart from the answer.

Before a request is sent (`replay_messages`), the history is made acceptable to strict providers:
arguments that do not parse as a JSON object PostgreSQL could store are replayed as "{}" (the tool
message answering that id already carries the error), and `reasoning_content` is kept only on the
assistant messages of the current turn (after the last user message), where DeepSeek requires it.

Reading an answer tolerates what providers send (`member`, `members`, `call_index`,
`refusal_text`, `finish_reason_of`, `content_parts`); `error_message_and_code` reads their error
bodies. The joining of stream chunks itself is `agentplatform.llm.assembly`.
"""
from __future__ import annotations

import json
from typing import Any

from django.conf import settings

from agentplatform.llm.call_shapes import RawCall, normalize_calls
from agentplatform.llm.types import ModelTurn
from core.redaction.text import PROVIDER_MESSAGE_CHARS
from core.text import loads_json, storable_text, unstorable_reason


# finish_reason spellings of compatible servers -> OpenAI's. Anything else is kept as sent, and a
# turn with an unknown reason is not `complete`: its calls are refused, never executed (fail closed).
FINISH_REASONS = {
    "tool_call": "tool_calls", "function_call": "tool_calls", "tool_use": "tool_calls",
    "eos": "stop", "eos_token": "stop", "end_turn": "stop", "stop_sequence": "stop",
    "max_tokens": "length", "model_length": "length",
}


def finish_reason_of(value: Any) -> str:
    """OpenAI's spelling of a finish_reason ("stop" when missing)."""
    reason = str(value or "stop").strip().lower()
    return FINISH_REASONS.get(reason, reason)


def content_parts(value: Any) -> tuple[str, str]:
    """(text, reasoning) of a message `content`: a string, or a list of parts as Mistral's reasoning
    models send (`{"type": "text", "text": ...}`, `{"type": "thinking", "thinking": [...]}`)."""
    if value is None:
        return "", ""
    if isinstance(value, str):
        return value, ""
    text: list[str] = []
    thinking: list[str] = []
    for part in value if isinstance(value, list) else [value]:
        if isinstance(part, str):
            text.append(part)
        elif isinstance(part, dict):
            kind = part.get("type")
            if kind == "text" and isinstance(part.get("text"), str):
                text.append(part["text"])
            elif kind in ("thinking", "reasoning"):
                inner = part.get("thinking", part.get("reasoning", ""))
                thinking.append(content_parts(inner)[0] if not isinstance(inner, str) else inner)
    return "".join(text), "".join(thinking)


def normalize_turn(*, content: Any, raw_calls: list[RawCall], finish_reason: str | None, reasoning: str = "",
                   taken: set[str] | None = None) -> ModelTurn:
    """One canonical ModelTurn from what a provider sent: text cleaned (content given as parts is
    joined, its thinking parts go to the reasoning), calls normalised, finish_reason in OpenAI's
    spelling (FINISH_REASONS)."""
    text, thinking = content_parts(content)
    return ModelTurn(content=storable_text(text), tool_calls=normalize_calls(raw_calls, taken=taken),
                     finish_reason=finish_reason_of(finish_reason),
                     reasoning=storable_text((reasoning or "") + thinking))


def replayable_arguments(arguments: Any) -> str:
    """`arguments` when they parse as a JSON object PostgreSQL could store and are within
    TOOLS_MAX_ARGUMENT_BYTES (the pipeline refused larger ones; replaying them would resend them
    with every later request of the run), else "{}"."""
    if isinstance(arguments, str):
        limit = settings.TOOLS_MAX_ARGUMENT_BYTES
        if len(arguments) > limit or (len(arguments) * 4 > limit and len(arguments.encode("utf-8")) > limit):
            return "{}"  # bytes, as the pipeline counts them (a CJK character is 3)
        try:
            parsed = loads_json(arguments)
        except ValueError:
            return "{}"
        if isinstance(parsed, dict) and not unstorable_reason(parsed):
            return arguments
    return "{}"


def replay_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request's messages as a strict provider accepts them (copies; `messages` is untouched).

    Arguments that do not parse are replaced by "{}" (strict providers refuse the request
    otherwise); `reasoning_content` stays only on assistant messages after the last user message
    (DeepSeek requires it there and refuses it elsewhere). Everything else is kept.
    """
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    replayed = []
    for index, message in enumerate(messages):
        if message.get("role") != "assistant":
            replayed.append(message)
            continue
        copy = dict(message)
        if "reasoning_content" in copy and (index < last_user or not copy["reasoning_content"]):
            del copy["reasoning_content"]
        if copy.get("tool_calls"):
            copy["tool_calls"] = [
                {**call, "function": {**call.get("function", {}),
                                      "arguments": replayable_arguments((call.get("function") or {}).get("arguments"))}}
                for call in copy["tool_calls"]
            ]
        replayed.append(copy)
    return replayed


# -- reading a provider's answer and error body ----------------------------------------------------

def member(value: Any, name: str) -> Any:
    """`value[name]` when `value` is a JSON object, else None (a provider's chunk may omit or null
    any part of the chat-completions shape)."""
    return value.get(name) if isinstance(value, dict) else None


def members(value: Any, name: str) -> list:
    """`value[name]` when it is a JSON array, else []."""
    found = member(value, name)
    return found if isinstance(found, list) else []


def call_index(value: Any) -> int | None:
    """A tool-call fragment's (or a choice's) `index` as an int (a digit string or an integral
    number, as some servers send it), or None when it is missing or unusable (a fragment then
    continues the last call, see `agentplatform.llm.assembly`)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        return int(value.strip())  # ASCII only: "²".isdigit() is True, but int("²") fails
    return None


# finish_reason values after which a turn may execute tools (ModelTurn.complete); once a stream
# has said anything else (length, content_filter, an unknown reason) a later chunk cannot undo it.
COMPLETE_REASONS = ("stop", "tool_calls")


def refusal_text(value: Any) -> str:
    """The text of a `refusal` field (OpenAI's structured refusal), "" when there is none."""
    return value if isinstance(value, str) else ""


# A turn that only carries the pre-`tools` `function_call` is refused, never guessed into a call.
LEGACY_CALL = ("the model answered with a legacy `function_call`, which this platform does not run "
               "(it sends `tools` and reads `tool_calls`)")


def error_message_and_code(body: Any) -> tuple[str, str]:
    """(message, code-or-type) from an error body (`{"error": {...}}` already unwrapped by the SDK,
    `{"message": ...}`, `{"detail": ...}` (vLLM/FastAPI) or plain text); ("", "") for anything else.
    A message that is not text is given as JSON text of at most 2 * PROVIDER_MESSAGE_CHARS."""
    if isinstance(body, dict):
        inner = body.get("error") if isinstance(body.get("error"), dict) else body
        message = inner.get("message") or inner.get("detail") or inner.get("error") or ""
        code = inner.get("code") or inner.get("type") or ""
        if not isinstance(message, str):
            message = json.dumps(message, ensure_ascii=False)[:PROVIDER_MESSAGE_CHARS * 2]
        return message, str(code)
    if isinstance(body, str):
        return body, ""
    return "", ""
