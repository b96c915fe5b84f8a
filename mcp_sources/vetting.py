"""The checks a remote tool's definition must pass before anyone may review it (docs/remote_tools.md,
"What a definition must look like"): what a model reads of it must be what a reviewer sees.

Everything the model receives is checked: the tool's name, its description, and every string of
its input schema (property names, descriptions, titles, enum values, defaults, examples, patterns,
nested and referenced schemas, keys and values). A definition that fails is *refused*: it is kept
for the reviewer to look at (escaped), its tool stays disabled and cannot be reviewed; the server's
owner must fix it. Refused, not cleaned or flagged, because the model reads code points: showing a
reviewer an escaped `\\u{E0041}` protects the reviewer, not the model, and a cleaned copy would not
be the definition the server serves (a call checks the server's definition against the reviewed
hash).

| what | rule |
| --- | --- |
| tool name | `[A-Za-z0-9_.-]`, 1-128 characters (the MCP specification's tool-name characters) |
| property names (`properties`, `required`, `dependentRequired`, `$defs`) | `[A-Za-z0-9_.-]`, 1-64 characters |
| description | at most 2,000 characters; no hidden character except newline and tab |
| every other string of the schema, keys included | at most 500 characters; no hidden character; newline and tab only in a `description` |
| the schema | at most 16 levels deep and 20,000 characters of canonical JSON |
| any string | no run of more than 3 blank lines or more than 32 spaces/tabs: what follows it would be out of the reviewer's sight (a screen of nothing), not out of the model's |

"Hidden" is core.visible_text.hidden_characters: control, format (tags, bidi overrides
and isolates, zero-width), private-use, unassigned, surrogate, line/paragraph separators and the
characters invisible by design (variation selectors, fillers). A lone CR before LF counts as the
newline it ends.
"""
from __future__ import annotations

import json
import re
from typing import Any

from core.visible_text import describe, hidden_characters

TOOL_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,128}")
PROPERTY_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
MAX_DESCRIPTION = 2000
MAX_SCHEMA_STRING = 500
MAX_SCHEMA_DEPTH = 16
MAX_SCHEMA_JSON = 20000
_DESCRIPTION_WHITESPACE = "\n\t"
# Keywords whose object maps property names to schemas (or lists), and whose list holds names.
_NAMED_MAPS = ("properties", "$defs", "definitions", "dependentRequired", "dependentSchemas")
_NAME_LISTS = ("required",)
_MAX_PROBLEMS = 10
# Blank space that scrolls what follows out of sight on the review page: 4 or more line breaks with
# only spaces or tabs between them, or 33 or more spaces, tabs or other spaces (Zs) in a row.
_BLANK_RUN = re.compile(r"\n(?:[^\S\n]*\n){3,}|[^\S\n]{33,}")


def _where(path: list[str]) -> str:
    return "inputSchema" + "".join(f"[{json.dumps(p, ensure_ascii=True)}]" for p in path)


def _text_problems(text: str, *, where: str, cap: int, allow: str) -> list[str]:
    problems = []
    if len(text) > cap:
        problems.append(f"{where}: {len(text)} characters, at most {cap}")
    hidden = hidden_characters(text.replace("\r\n", "\n"), allow=allow)
    if hidden:
        shown = ", ".join(f"{describe(c)} at {i}" for i, c in hidden[:3])
        more = f" and {len(hidden) - 3} more" if len(hidden) > 3 else ""
        problems.append(f"{where}: {len(hidden)} hidden character(s): {shown}{more}")
    blank = _BLANK_RUN.search(text.replace("\r\n", "\n"))
    if blank:
        problems.append(f"{where}: {len(blank.group(0))} blank characters in a row at {blank.start()} (more than 3 "
                        f"blank lines or 32 spaces): what follows is out of a reviewer's sight")
    return problems


def definition_problems(*, name: str, description: str | None, input_schema: Any) -> list[str]:
    """Why this definition must be refused, as sentences naming the field and the characters
    (code points, never the raw characters); [] when it passes every rule of the table above.
    At most 10 problems are listed."""
    problems: list[str] = []
    if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
        problems.append(f"name {json.dumps(str(name)[:140], ensure_ascii=True)}: only A-Z a-z 0-9 _ . -, "
                        f"1-128 characters")
    problems += _text_problems(description or "", where="description", cap=MAX_DESCRIPTION,
                               allow=_DESCRIPTION_WHITESPACE)
    if input_schema is None:
        input_schema = {}
    if not isinstance(input_schema, dict):
        return (problems + ["inputSchema: not a JSON object"])[:_MAX_PROBLEMS]
    try:
        size = len(json.dumps(input_schema, ensure_ascii=False, sort_keys=True, separators=(",", ":")))
    except (TypeError, ValueError, RecursionError):
        return (problems + ["inputSchema: not JSON"])[:_MAX_PROBLEMS]
    if size > MAX_SCHEMA_JSON:
        problems.append(f"inputSchema: {size} characters of JSON, at most {MAX_SCHEMA_JSON}")
    _walk(input_schema, [], problems, depth=0, key="")
    return problems[:_MAX_PROBLEMS]


def _walk(node: Any, path: list[str], problems: list[str], *, depth: int, key: str) -> None:
    if len(problems) >= _MAX_PROBLEMS:
        return
    if depth > MAX_SCHEMA_DEPTH:
        problems.append(f"{_where(path)}: nested more than {MAX_SCHEMA_DEPTH} levels")
        return
    if isinstance(node, str):
        allow = _DESCRIPTION_WHITESPACE if key == "description" else ""
        problems += _text_problems(node, where=_where(path), cap=MAX_SCHEMA_STRING, allow=allow)
        if key in _NAME_LISTS and not PROPERTY_NAME.fullmatch(node):
            problems.append(f"{_where(path)}: a property name: only A-Z a-z 0-9 _ . -, 1-64 characters")
    elif isinstance(node, dict):
        for child_key, value in node.items():
            child_path = path + [str(child_key)]
            if not isinstance(child_key, str):
                problems.append(f"{_where(child_path)}: a key that is not a string")
                continue
            if key in _NAMED_MAPS and not PROPERTY_NAME.fullmatch(child_key):
                problems.append(f"{_where(child_path)}: a property name: only A-Z a-z 0-9 _ . -, 1-64 characters")
            else:
                problems += _text_problems(child_key, where=_where(child_path) + " (key)", cap=MAX_SCHEMA_STRING,
                                           allow="")
            # The keyword names the child; under a named map the child is a schema again.
            _walk(value, child_path, problems, depth=depth + 1, key="" if key in _NAMED_MAPS else child_key)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            _walk(value, path + [str(index)], problems, depth=depth + 1, key=key)
