"""Reading a bundle's Cedar text before Cedar does: where a syntax error is (the policy's @id and
line), and refusing text too deeply nested or too long for Cedar's recursive parser, which would
overflow the native stack and kill the process rather than raise (docs/policy.md, "Bad bundles")."""
from __future__ import annotations

import re
from collections.abc import Iterator

import cedarpy

_ID = re.compile(r'@id\(\s*"([^"\\]{1,100})"\s*\)')


def _code(text: str) -> Iterator[tuple[int, str, int]]:
    """The characters of Cedar `text` outside strings and `//` comments: (index, character, line
    number, 1-based). Newlines are counted, not yielded."""
    index, line, in_string, in_comment = 0, 1, False, False
    while index < len(text):
        char = text[index]
        if char == "\n":
            line += 1
            in_comment = False
        elif in_comment:
            pass
        elif in_string:
            if char == "\\":
                index += 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif text.startswith("//", index):
            in_comment = True
        else:
            yield index, char, line
        index += 1


def _statements(text: str) -> list[tuple[int, str]]:
    """Split Cedar text into its statements (each ending with a `;` outside strings, comments and
    brackets): [(line of its first character, 1-based; text)]."""
    statements, start, depth, start_line = [], 0, 0, 1
    for index, char, line in _code(text):
        if char in "({[":
            depth += 1
        elif char in ")}]":
            depth -= 1
        elif char == ";" and depth <= 0:
            statements.append((start_line, text[start:index + 1]))
            start, depth = index + 1, 0
            start_line = line
    if text[start:].strip():
        statements.append((start_line, text[start:]))
    return statements


MAX_NESTING = 64  # brackets (and `if`) inside one another
MAX_OPERATORS = 2000  # operators, calls and attribute accesses in one policy
_OPERATOR = re.compile(r"&&|\|\||[-+*.!<>=]=?|\b(?:if|has|like|in|is)\b")
_IF = re.compile(r"\bif\b")


def too_complex(text: str) -> dict[str, str] | None:
    """The first place where `text` nests brackets deeper than MAX_NESTING, or one policy holds
    more than MAX_OPERATORS operators or MAX_NESTING `if`s, read outside strings and comments;
    None when it is within all three. Checked before Cedar reads the text: Cedar's parser,
    validator and evaluator recurse, and some hundreds of nested brackets or `if`s (or thousands
    of chained operators) overflow the native stack and kill the process, which no exception
    handler can catch."""
    depth, start_line, code = 0, 1, []

    def crowded() -> dict[str, str] | None:
        chunk = "".join(code)
        if len(_OPERATOR.findall(chunk)) > MAX_OPERATORS:
            return {"where": f"cedar (line {start_line})", "message": f"a policy with more than {MAX_OPERATORS} "
                                                                      "operators; split it"}
        if len(_IF.findall(chunk)) > MAX_NESTING:
            return {"where": f"cedar (line {start_line})", "message": f"a policy with more than {MAX_NESTING} `if`s"}
        return None

    for _, char, line in _code(text):
        code.append(char)
        if char in "({[":
            depth += 1
            if depth > MAX_NESTING:
                return {"where": f"cedar (line {line})", "message": f"brackets nested deeper than {MAX_NESTING}"}
        elif char in ")}]":
            depth = max(depth - 1, 0)
        elif char == ";" and depth == 0:
            problem = crowded()
            if problem:
                return problem
            code, start_line = [], line
    return crowded()


def syntax_error(text: str, error: str) -> dict[str, str]:
    """Where a Cedar syntax error is: the first statement that does not parse on its own (its @id
    and line) or, failing that, the whole text."""
    for first, chunk in _statements(text):
        try:
            cedarpy.policies_to_json_str(chunk)
        except ValueError as exc:
            lines = chunk.split("\n")
            skipped = next((i for i, text_line in enumerate(lines)
                            if text_line.strip() and not text_line.strip().startswith("//")), 0)
            named = _ID.search(chunk)
            where = f"policy {named.group(1)}" if named else "cedar"
            return {"where": f"{where} (line {first + skipped} of cedar)", "message": f"Cedar syntax error: {exc}"[:1000]}
    return {"where": "cedar", "message": f"Cedar syntax error: {error}"[:1000]}
