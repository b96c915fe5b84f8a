"""Text the database can store.

PostgreSQL refuses two kinds of Python text: the NUL character U+0000 (a `text` column cannot hold
it, and `jsonb` rejects the escape `\\u0000`: PostgreSQL manual, 8.14 "JSON Types") and lone UTF-16
surrogates U+D800..U+DFFF (they have no UTF-8 encoding; psycopg raises UnicodeEncodeError, and
`jsonb` rejects an unpaired `\\ud800` escape). SQLite stores both, so a bug here only shows on
PostgreSQL. Model output and user input may carry either (a provider's JSON may escape anything).

`storable_text` cleans free text (each such character becomes U+FFFD, so what was there stays
visible); `unstorable_reason` says why a parsed value (e.g. tool arguments) cannot be stored, for
callers that must refuse rather than clean. This module sits at the bottom: every app may use it.
"""
from __future__ import annotations

import json
import re
from typing import Any

REPLACEMENT = "\ufffd"
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def storable_text(text: str) -> str:
    """`text` with every NUL and lone surrogate replaced by U+FFFD; a surrogate *pair* (an emoji a
    provider escaped as two halves) is joined into its character. Non-str -> ""."""
    if not isinstance(text, str):
        return ""
    if not _UNSTORABLE.search(text):
        return text
    if _SURROGATE.search(text):
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text.replace("\x00", REPLACEMENT)


def unstorable_reason(value: Any) -> str:
    """Why `value` (str, or JSON-like dict/list nesting, keys included) cannot be stored as text or
    jsonb in PostgreSQL: "" when it can, else a short reason naming the character."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found = _UNSTORABLE.search(item)
            if found:
                char = found.group(0)
                return ("contains a NUL character (U+0000)" if char == "\x00"
                        else f"contains a lone surrogate (U+{ord(char):04X})")
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return ""


def loads_json(text: str | bytes) -> Any:
    """`json.loads(text)`, with a document nested too deeply for the parser (which raises
    RecursionError) refused like any other malformed JSON: raises json.JSONDecodeError (a
    ValueError with `msg` and `pos`). For text a model or a provider sent: a few kilobytes of
    brackets must not escape as an unhandled error (a 500)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError("the JSON is nested too deeply", text if isinstance(text, str) else "", 0) from None


def says_nothing(arguments: Any) -> bool:
    """Whether a tool call's raw `arguments` carry no argument at all: None (`"arguments": null`
    or no field), "" (GLM for a call without parameters), whitespace only, or the JSON literal
    `null`. Such arguments are the empty object `{}`: a tool without required parameters runs,
    one with required parameters is refused naming them (docs/providers.md)."""
    if arguments is None:
        return True
    return isinstance(arguments, str) and arguments.strip() in ("", "null")


def is_row_id(value: Any) -> bool:
    """Whether `value` is a row id as typed in a URL or form: a non-empty str of ASCII digits only
    ("²" and "١" pass str.isdigit() but int() refuses them)."""
    return isinstance(value, str) and value.isascii() and value.isdigit()
