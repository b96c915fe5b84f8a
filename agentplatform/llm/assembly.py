"""The wire assembly: a chat-completions answer (a stream of chunks, or one completion, as
decoded JSON) becomes one canonical ModelTurn.

Streaming tool-call deltas are joined by `index` here before anyone parses the arguments; what
the provider sent is then normalised by `agentplatform.llm.normalize`, the one place that knows
provider shapes (docs/providers.md). A part of the wrong JSON type is ignored, never a crash.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from agentplatform.llm import call_shapes, normalize
from agentplatform.llm.errors import ModelUnavailable
from agentplatform.llm.normalize import COMPLETE_REASONS, LEGACY_CALL, call_index, member, members, refusal_text
from agentplatform.llm.types import ModelTurn
from core.text import loads_json, storable_text


def assemble_stream(chunks: Iterator[Any], on_text: Callable[[str], None] | None,
                     taken: set[str]) -> ModelTurn:
    """Join the deltas of a chat.completion.chunk stream (decoded JSON objects) into one canonical
    ModelTurn.

    Text deltas are concatenated (each passed, cleaned, to on_text as it comes); `reasoning_content`
    deltas are kept apart; `refusal` deltas are the answer when there is no text. Tool-call deltas
    are joined by `index` (`_add_fragment`): id and name are taken from the first delta that
    carries them, argument fragments are kept in arrival order, a fragment naming another id or
    function at the same index is a new call, and one repeating the complete call is the same call
    (`call_shapes.repeats`). The finish_reason is the last one seen, except that a
    truncating one (length, content_filter, anything but stop/tool_calls) is never overridden by a
    later chunk. A part of the wrong JSON type is ignored. Raises ModelUnavailable when the stream
    ends without any finish_reason (a dropped or truncated stream), or carries only a legacy
    `function_call`.
    """
    text: list[str] = []
    reasoning: list[str] = []
    refusal: list[str] = []
    calls: list[call_shapes.RawCall] = []  # in the order they started
    position: dict[int, int] = {}  # the provider's index -> the call it currently continues
    finish_reason: str | None = None
    legacy_call = False
    for chunk in chunks:
        # Usage-only chunks and Azure's prompt-filter chunk have no choices.
        for choice in members(chunk, "choices"):
            if not isinstance(choice, dict):
                continue
            if choice.get("index") is not None and call_index(choice["index"]) != 0:
                continue  # another choice than the first (n > 1); an index of "0" is the first too
            delta = choice.get("delta")
            if isinstance(delta, dict):
                thought = delta.get("reasoning_content")
                if isinstance(thought, str) and thought:
                    reasoning.append(thought)
                if delta.get("content"):
                    piece, thinking = normalize.content_parts(delta["content"])
                    reasoning.append(thinking)
                    text.append(piece)
                    if on_text is not None and piece:
                        on_text(storable_text(piece))
                refusal.append(refusal_text(delta.get("refusal")))
                legacy_call = legacy_call or isinstance(delta.get("function_call"), dict)
                for fragment in members(delta, "tool_calls"):
                    if not isinstance(fragment, dict):
                        continue
                    _add_fragment(fragment, calls, position)
            reason = choice.get("finish_reason")
            if reason and (finish_reason is None or normalize.finish_reason_of(finish_reason) in COMPLETE_REASONS):
                finish_reason = reason  # a truncating reason already seen (in any spelling) is never overridden
    if finish_reason is None:
        raise ModelUnavailable("the model stream ended before the turn finished")
    content = "".join(text) or "".join(refusal)  # a structured refusal is the model's answer
    if legacy_call and not calls:
        raise ModelUnavailable(LEGACY_CALL)
    return normalize.normalize_turn(content=content, reasoning="".join(reasoning),
                                    raw_calls=sorted(calls, key=lambda call: call.order),
                                    finish_reason=finish_reason, taken=taken)


def _whole(call: call_shapes.RawCall) -> bool:
    """True when `call`'s argument fragments so far already form one JSON value."""
    text = "".join(part if isinstance(part, str) else json.dumps(part) for part in call.arguments)
    if not text.strip():
        return False
    try:
        loads_json(text)
    except ValueError:
        return False
    return True


def _add_fragment(fragment: dict, calls: list, position: dict[int, int]) -> None:
    """Add one streamed tool-call fragment to `calls` (RawCall, in the order they started).

    Fragments are joined by the provider's `index`. At an index that holds a call, a fragment
    naming another function is a new call, never a continuation (some servers send every call at
    index 0; merging would build a call the model never made from one call's name and another's
    arguments); so is one naming the same function under another id once the call's arguments are
    whole. Any other fragment continues the call: some providers repeat the id and name on every
    delta, and some change the id on later chunks of the same call. A fragment without an index
    continues the last call, unless it starts a new named one with another id. Arguments that
    repeat the call's complete arguments (the whole call sent again, as some servers do in a last
    chunk) are not added: joined, `{"a":1}{"a":1}` would refuse a call the model made once.
    """
    function = fragment.get("function")
    function = function if isinstance(function, dict) else None
    name = function.get("name") if function is not None else None
    call_id = fragment.get("id") or None
    index = call_index(fragment.get("index"))
    current = calls[position[index]] if index is not None and index in position else \
        (calls[-1] if index is None and calls else None)
    if current is None:
        starts_new = True
    elif index is None:  # whole calls in one chunk each (Ollama, llama.cpp): a named one with another id
        starts_new = bool(name and current.name and call_id != current.id)
    else:
        # At an occupied index only a fragment naming a function can start a call: another name, or
        # another id once the call's arguments are whole (some servers change the id on later
        # chunks of the same call: those continue it).
        starts_new = bool(name and current.name and (
            name != current.name or (call_id and current.id and call_id != current.id and _whole(current))))
    if starts_new:
        current = call_shapes.RawCall()
        # Ordered by the provider's index (then by arrival); one without an index after the rest.
        current.order = (index if index is not None else max((c.order[0] for c in calls), default=-1) + 1,
                         len(calls))
        calls.append(current)
        if index is not None:
            position[index] = len(calls) - 1
    if call_id and not current.id:
        current.id = call_id
    if function is not None:
        if name and not current.name:
            current.name = name
        arguments = function.get("arguments")
        if arguments is not None and arguments != "" and not call_shapes.repeats(current.arguments, arguments):
            current.arguments.append(arguments)


def turn_from_completion(completion: Any, on_text: Callable[[str], None] | None, taken: set[str]) -> ModelTurn:
    """The ModelTurn of a whole (non-streamed) chat completion, decoded JSON. A body sent with a
    non-JSON content type arrives as text and is decoded here. Raises ModelUnavailable when it is
    not JSON or has no choice object."""
    if isinstance(completion, (str, bytes)):
        try:
            completion = loads_json(completion)
        except (ValueError, UnicodeError):
            raise ModelUnavailable("the model endpoint sent an answer that is not JSON") from None
    choices = [choice for choice in members(completion, "choices") if isinstance(choice, dict)]
    if not choices:
        raise ModelUnavailable("the model endpoint returned no choices")
    choice = choices[0]
    message = member(choice, "message") or {}
    raw_calls = []
    for call in members(message, "tool_calls"):
        function = member(call, "function")  # custom (non-function) tools are not used here
        if isinstance(function, dict):
            raw_calls.append(call_shapes.RawCall(id=call.get("id"), name=function.get("name"),
                                               arguments=[function.get("arguments")]))
    if not raw_calls and isinstance(member(message, "function_call"), dict):
        raise ModelUnavailable(LEGACY_CALL)
    reasoning = member(message, "reasoning_content")
    content = member(message, "content")
    if not content:
        content = refusal_text(member(message, "refusal")) or content  # a structured refusal is the answer
    turn = normalize.normalize_turn(content=content, raw_calls=raw_calls,
                                    reasoning=reasoning if isinstance(reasoning, str) else "",
                                    finish_reason=choice.get("finish_reason") or "stop", taken=taken)
    if turn.content and on_text is not None:
        on_text(turn.content)
    return turn
