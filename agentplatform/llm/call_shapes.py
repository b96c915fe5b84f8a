"""The tool calls of one model turn, from what a provider sent to canonical calls: the call half
of `agentplatform.llm.normalize` (which owns the rest of the turn and the replay), kept apart so
each module stays readable. The table of shapes is docs/providers.md.

- every call gets an id unique within the turn and the run's history (`functions.cancel_order:0`
  twice, or no id at all, must not overwrite one another: a pending map, a confirmation and a tool
  message are keyed by it); the first holder of an id keeps it, the others get `internal_call_id()`;
- an entry with no name and no arguments (a phantom index) is dropped and logged;
- an entry that repeats an earlier one whole (same id, same name, equal arguments: two identical
  entries of a non-streamed answer, or a stream that sends the complete call again at another
  index) is the same call, kept once and logged; `repeats` is the stream's rule for a repeated
  complete call at the same index (`agentplatform.llm.assembly`);
- arguments sent as a JSON object (or any non-string JSON) are serialised canonically (sorted keys,
  no spaces, UTF-8);
- arguments that say nothing (`core.text.says_nothing`: none, `null`, "", whitespace) are the empty
  object "{}": a tool without required parameters runs, one with required parameters is refused
  by the pipeline's schema check naming the missing ones;
- text PostgreSQL cannot store (NUL, lone surrogates; `core.text`) is *escaped* in arguments, so the
  message can be stored and the pipeline still sees the character and refuses the call with
  INVALID_ARGUMENTS (audited).
"""
from __future__ import annotations

import json
import logging
import re
import secrets
import string
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from agentplatform.llm.types import ModelToolCall
from core.text import loads_json, says_nothing, storable_text, unstorable_reason

logger = logging.getLogger("agentplatform.llm.normalize")  # one logger for every provider shape

# The longest id kept as the provider sent it (Message.tool_call_id holds 128; audit rows 100).
MAX_CALL_ID_CHARS = 64
EMPTY_ARGUMENTS = "{}"
_ID_ALPHABET = string.ascii_letters + string.digits
_UNSTORABLE_IN_ARGUMENTS = re.compile("[\x00\ud800-\udfff]")


@dataclass
class RawCall:
    """One tool-call entry as a provider sent it (streamed: the fragments joined by index).

    arguments: the argument fragments in arrival order, each a string or (some providers) a JSON
    value such as an object; a non-streamed call has one fragment. order: where a streamed call
    goes among the turn's calls ((the provider's index, arrival); agentplatform.llm.assembly).
    """

    id: Any = None
    name: Any = None
    arguments: list[Any] = field(default_factory=list)
    order: tuple[int, int] = (0, 0)


def internal_call_id(taken: set[str]) -> str:
    """A fresh call id not in `taken`: nine ASCII letters and digits, the strictest format a known
    provider accepts (Mistral: `^[a-zA-Z0-9]{9}$`; OpenAI and the others take any string)."""
    while True:
        candidate = "".join(secrets.choice(_ID_ALPHABET) for _ in range(9))
        if candidate not in taken:
            return candidate


def canonical_json(value: Any) -> str:
    """JSON text with sorted keys, no spaces, UTF-8: the platform's canonical form of arguments."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _escape_unstorable(text: str) -> str:
    # `\u0000` (six characters) instead of the character: storable in a text or jsonb column, and
    # still the same JSON value when the pipeline parses it (which then refuses it).
    return _UNSTORABLE_IN_ARGUMENTS.sub(lambda m: f"\\u{ord(m.group(0)):04x}", text)


def _joined(fragments: list[Any]) -> str:
    """The fragments as one text, as sent (strings joined; a lone JSON value serialised)."""
    values = [f for f in fragments if f is not None and f != ""]
    if not values:
        return ""
    if all(isinstance(v, str) for v in values):
        return "".join(values)
    if len(values) == 1:
        return canonical_json(values[0])
    # a mixture nobody should send: joined as text, the pipeline judges it
    return "".join(v if isinstance(v, str) else canonical_json(v) for v in values)


def arguments_text(fragments: list[Any]) -> str:
    """The arguments of one call as JSON text.

    Strings are joined. A JSON value sent instead of a string (GLM, Ollama: an object) is
    serialised canonically; a single such value among empty strings is taken as the arguments.
    Arguments that say nothing (no fragment, None, "", whitespace, `null`) give "{}".
    Unstorable characters are escaped (see module doc).
    """
    text = _joined(fragments)
    if says_nothing(text):
        return EMPTY_ARGUMENTS
    return _escape_unstorable(text)


def _object(value: Any) -> str | None:
    """`value` (JSON text, or a JSON value a provider sent instead) as the canonical text of a JSON
    object, else None. Canonical, so `1` and `true` (equal in Python) differ, and spacing and key
    order do not matter."""
    if isinstance(value, str):
        text = value.strip()
        if not (text.startswith("{") and text.endswith("}")):
            return None  # cheap: most streamed fragments are pieces of an object
        try:
            value = loads_json(value)
        except ValueError:
            return None
    return canonical_json(value) if isinstance(value, dict) else None


def repeats(fragments: list[Any], fragment: Any) -> bool:
    """Whether the streamed argument `fragment` repeats the whole call whose fragments so far are
    `fragments`: they already form a complete JSON object and `fragment` is by itself a complete
    JSON object equal to it (a provider sending the finished call again, with or without its id,
    name or finish_reason). Never true for a legitimate delta: once the text is a complete object,
    only whitespace may follow it. A *different* complete object is not a repeat (joined, the
    arguments no longer parse, and the turn is refused rather than guessed)."""
    if not fragments:
        return False
    again = _object(fragment)  # the fragment first: it is short, the arguments so far may be long
    return again is not None and _object(_joined(fragments)) == again


def _is_phantom(call: RawCall) -> bool:
    name = call.name if isinstance(call.name, str) else ""
    return not name.strip() and says_nothing(_joined(call.arguments))


def _repeats_kept(key: tuple[str, str] | None, text: str, kept: dict[tuple[str, str], list[str]]) -> bool:
    """Whether an entry (key: its (id, name), None without an id; text: its arguments) repeats an
    entry kept earlier whole: the same id and name and equal arguments, compared as JSON objects
    (spacing and key order do not matter). Parses only when the id and name were seen before."""
    if key is None or key not in kept:
        return False
    mine = _object(text)
    return mine is not None and any(_object(earlier) == mine for earlier in kept[key])


def history_call_ids(messages: Iterable[dict[str, Any]]) -> set[str]:
    """The tool call ids already used by the assistant messages of `messages`."""
    taken: set[str] = set()
    for message in messages:
        if message.get("role") == "assistant":
            for call in message.get("tool_calls") or ():
                if isinstance(call, dict) and call.get("id"):
                    taken.add(str(call["id"]))
    return taken


def normalize_calls(raw_calls: list[RawCall], *, taken: set[str] | None = None) -> list[ModelToolCall]:
    """Canonical calls of one turn, in the provider's order (see module doc).

    taken: ids already used earlier in the run's history; a call reusing one gets a fresh id.
    Logs each phantom dropped, each repeat dropped and each id replaced.
    """
    used = set(taken or ())
    calls: list[ModelToolCall] = []
    kept: dict[tuple[str, str], list[str]] = {}  # (id, name) as sent -> the arguments of the entries kept
    for position, raw in enumerate(raw_calls):
        if _is_phantom(raw):
            logger.warning("model turn: dropped tool-call entry %d with no name and no arguments (id %r)",
                           position, str(raw.id)[:MAX_CALL_ID_CHARS] if raw.id else "")
            continue
        text = arguments_text(raw.arguments)
        key = (str(raw.id), str(raw.name)) if raw.id else None
        if _repeats_kept(key, text, kept):
            logger.warning("model turn: dropped tool-call entry %d repeating an earlier call whole (id %r)",
                           position, storable_text(str(raw.id))[:MAX_CALL_ID_CHARS])
            continue
        if key is not None:
            kept.setdefault(key, []).append(text)
        name = storable_text(raw.name) if isinstance(raw.name, str) else ""
        call_id = raw.id if isinstance(raw.id, str) else ("" if raw.id is None else str(raw.id))
        if (not call_id or call_id in used or len(call_id) > MAX_CALL_ID_CHARS
                or unstorable_reason(call_id) or not call_id.isprintable()):
            fresh = internal_call_id(used)
            if call_id:
                logger.info("model turn: tool-call id %r of entry %d replaced by %s (duplicate or unusable)",
                            storable_text(call_id)[:MAX_CALL_ID_CHARS], position, fresh)
            call_id = fresh
        used.add(call_id)
        calls.append(ModelToolCall(id=call_id, name=name, arguments=text))
    return calls
