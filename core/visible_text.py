"""Characters a reader cannot see, found and shown.

A text a person approves (a remote tool's description, its schema) is read by a model as code
points, by a person as glyphs. Whatever the two read differently is a place to hide an instruction:
Unicode tag characters (U+E0000..U+E007F) render as nothing and spell ASCII to a model; bidi
overrides and isolates (U+202A..U+202E, U+2066..U+2069) reorder what is shown; zero-width
characters (U+200B..U+200D, U+2060, U+FEFF) split or join words unseen.

`hidden_characters` finds, by Unicode general category (unicodedata, the Unicode version of this
Python), the controls (Cc), format characters (Cf), private-use (Co), unassigned (Cn) and surrogate
(Cs) code points, line and paragraph separators (Zl, Zp), and a short list of characters that are
letters or marks by category but invisible by design (variation selectors, used to smuggle bytes
after an emoji; Hangul fillers; the combining grapheme joiner; Mongolian variation selectors; the
blank Braille pattern).
`escaped` writes each of them as `\\u{XXXX}`, `visible_html` the same as HTML, marked, so a
reviewer sees every one. This module imports nothing of ours: every app may use it.
"""
from __future__ import annotations

import unicodedata

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

HIDDEN_CATEGORIES = {"Cc": "control", "Cf": "format", "Co": "private use", "Cn": "unassigned",
                     "Cs": "surrogate", "Zl": "line separator", "Zp": "paragraph separator"}
# Invisible by design although their category is a letter (Lo) or a mark (Mn).
_INVISIBLE_BY_DESIGN = (
    # ... and U+2800 BRAILLE PATTERN BLANK, a symbol (So) whose glyph is empty
    frozenset({0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x2800, 0x3164, 0xFFA0})
    | frozenset(range(0x180B, 0x1810))  # Mongolian free variation selectors and vowel separator
    | frozenset(range(0xFE00, 0xFE10))  # variation selectors 1-16
    | frozenset(range(0xE0100, 0xE01F0))  # variation selectors 17-256
)
# Shown escaped on review pages but not refused: spaces that look like U+0020 (no-break, ideographic...).
_SHOWN_ESCAPED_ONLY = frozenset({"Zs"})


def kind_of(char: str) -> str:
    """What kind of hidden character `char` is ("format", "control", ...), or "" for a visible one."""
    code = ord(char)
    if code in _INVISIBLE_BY_DESIGN:
        return "invisible by design"
    return HIDDEN_CATEGORIES.get(unicodedata.category(char), "")


def _emoji_presentation(text: str, i: int) -> bool:
    """U+FE0E/U+FE0F right after a symbol (an emoji's text or emoji presentation, "🌦️"): visible
    in effect and common; a run of selectors, or one after anything else, is not."""
    return text[i] in "\ufe0e\ufe0f" and i > 0 and unicodedata.category(text[i - 1]) == "So"


def hidden_characters(text: str, *, allow: str = "") -> list[tuple[int, str]]:
    """The hidden characters of `text` as (index, character), in order; characters in `allow`
    (e.g. "\\n\\t" for a description) are not reported, nor an emoji presentation selector right
    after a symbol. Non-str -> []."""
    if not isinstance(text, str):
        return []
    return [(i, c) for i, c in enumerate(text) if c not in allow and kind_of(c) and not _emoji_presentation(text, i)]


def describe(char: str) -> str:
    """`char` named for a person: "U+E0041 (format, TAG LATIN CAPITAL LETTER A)"."""
    name = unicodedata.name(char, "") if kind_of(char) != "surrogate" else ""
    return f"U+{ord(char):04X} ({kind_of(char) or unicodedata.category(char)}{', ' + name if name else ''})"


def _shown_escaped(char: str, allow: str) -> bool:
    if char in allow or char == " ":
        return False
    return bool(kind_of(char)) or unicodedata.category(char) in _SHOWN_ESCAPED_ONLY


def escaped(text: str, *, allow: str = "\n") -> str:
    """`text` with every hidden character (and every space other than U+0020) written as
    `\\u{XXXX}`; a backslash before "u{" is doubled, so an escape the text wrote itself cannot pass
    for one of ours. Characters in `allow` stay as they are."""
    if not isinstance(text, str):
        return text
    return "".join(_pieces(text, allow, hidden=lambda char: f"\\u{{{ord(char):X}}}", plain=lambda char: char))


def _pieces(text: str, allow: str, *, hidden, plain):
    """`text` one character at a time: a server's own backslash before "u{" doubled (so it cannot
    pass for one of our escapes), a hidden character through `hidden`, any other through `plain`."""
    for i, char in enumerate(text):
        if char == "\\" and text.startswith("u{", i + 1):
            yield "\\\\"
        elif _shown_escaped(char, allow):
            yield hidden(char)
        else:
            yield plain(char)


def visible_html(text: str, *, allow: str = "\n") -> SafeString:
    """`text` as HTML in which every hidden character is a highlighted `\\u{XXXX}` with its name as
    a tooltip (see `escaped`); everything else HTML-escaped."""
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    marked = "".join(_pieces(
        text, allow, plain=escape,
        hidden=lambda char: f'<mark class="hidden-char" title="{escape(describe(char))}">\\u{{{ord(char):X}}}</mark>'))
    return mark_safe(marked)  # noqa: S308 - every piece above is escaped
