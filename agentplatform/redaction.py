"""Masking of free text: every text that leaves the platform or is stored from a user goes through
`mask_text` (DESIGN section 8: "Text leaves the platform only through masking"; issue 9, items 9-10).

What is masked, wherever it appears in a string (not only under a telling key):

| what | shape recognised | becomes |
| --- | --- | --- |
| confirmation token, API key | `ct_` + 16 or more URL-safe characters; `ap_` + 32 or more hex digits | `[redacted token]` |
| payment card | 13-19 digits, optionally grouped by single spaces or dashes | first 4 + `****` + last 4 digits |
| national id (PRC resident id) | 17 digits + a digit or X | first 4 + `****` + last 4 |
| US social security number | `123-45-6789` | `***-**-6789` |
| phone number | PRC mobile `1[3-9]` + 9 digits (optionally `+86`, spaces or dashes), or `+` country code and 7-13 digits | first 3 + `****` + last 4 digits |
| email address | `local@domain.tld` | first character of the local part + `***@` + the domain |

A match must stand alone (no letter, digit or `_` glued to it), so order ids (`A202607290001`), SKUs
and UUIDs stay readable. Masked output never matches again (idempotent). Lives in the project
package because every app, down to `audit`, uses it (as `agentplatform.db`).
"""
from __future__ import annotations

import logging
import re
from typing import Any

TOKEN = re.compile(r"\b(?:ct_[A-Za-z0-9_\-]{16,}|ap_[0-9a-f]{32,})")
_EDGE_BEFORE = r"(?<![\w\-+])"
_EDGE_AFTER = r"(?![\w])"
NATIONAL_ID = re.compile(_EDGE_BEFORE + r"\d{17}[\dXx]" + _EDGE_AFTER)
SSN = re.compile(_EDGE_BEFORE + r"\d{3}-\d{2}-\d{4}" + r"(?![\w\-])")
CARD = re.compile(_EDGE_BEFORE + r"\d(?:[ \-]?\d){12,18}" + r"(?![\w\-])")
PHONE = re.compile(r"(?<![\w\-+])(?:(?:\+|00)86[ \-]?)?1[3-9]\d(?:[ \-]?\d){8}(?![\w\-])"
                   r"|(?<![\w\-+])\+\d{1,3}(?:[ \-]?\d){7,13}(?![\w\-])")


_ANY_DIGIT = re.compile(r"\d")
EMAIL = re.compile(r"(?<![\w.%+\-])([A-Za-z0-9._%+\-]+)@([A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,})(?![\w\-])")


def _digits(text: str) -> str:
    return re.sub(r"\D", "", text)


def _keep_ends(match: re.Match) -> str:
    raw = match.group(0)
    digits = re.sub(r"[^\dXx]", "", raw)
    return digits[:4] + "****" + digits[-4:]


def _phone(match: re.Match) -> str:
    digits = _digits(match.group(0))
    return digits[:3] + "****" + digits[-4:]


def mask_text(text: str) -> str:
    """`text` with tokens, card numbers, national ids, SSNs and phone numbers masked (table above).

    Non-strings are returned unchanged. Costs a few microseconds for a short text with no digits.
    """
    if not isinstance(text, str) or not text:
        return text
    text = TOKEN.sub("[redacted token]", text)
    if "@" in text:
        text = EMAIL.sub(lambda m: m.group(1)[0] + "***@" + m.group(2), text)
    if not _ANY_DIGIT.search(text):  # every pattern below needs a digit
        return text
    text = NATIONAL_ID.sub(_keep_ends, text)
    text = SSN.sub(lambda m: "***-**-" + m.group(0)[-4:], text)
    text = PHONE.sub(_phone, text)
    return CARD.sub(_keep_ends, text)


def mask_json(value: Any) -> Any:
    """A copy of a JSON-shaped value with `mask_text` applied to every string (keys kept)."""
    if isinstance(value, str):
        return mask_text(value)
    if isinstance(value, dict):
        return {k: mask_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [mask_json(v) for v in value]
    return value


# What a stream may still be in the middle of: a digit run (card, id, phone) or a token prefix.
_OPEN_TAIL = re.compile(r"(?:[+\d][\d \-]*[Xx]?|\bc|\bct|\bct_[A-Za-z0-9_\-]*|[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]*)$")


def split_open_tail(text: str) -> tuple[str, str]:
    """(safe, held): `held` is the end of `text` that may be the first part of something masked
    (a number or token cut by streaming); store `mask_text(safe)` now and prepend `held` to what
    comes next. At the end of the stream store `mask_text(held)` too."""
    # Only the end can be open, and nothing masked is longer than this: searching the whole text
    # was quadratic in its length.
    start = max(0, len(text) - _TAIL_WINDOW)
    match = _OPEN_TAIL.search(text, start)
    if match is None or match.start() == 0:
        return (text, "") if match is None else ("", text)
    return text[:match.start()], text[match.start():]


_TAIL_WINDOW = 320  # characters: longer than any token, number or email address the table masks


class MaskingFilter(logging.Filter):
    """A logging filter that masks the formatted message of every record (settings.LOGGING)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is logged as it is
            return True
        masked = mask_text(message)
        if masked != message:
            record.msg, record.args = masked, None
        for name, value in list(vars(record).items()):  # `extra=` fields too (a path, a request line)
            if name not in _NOT_MASKED and isinstance(value, str) and value:
                setattr(record, name, mask_text(value))
        return True


# Attributes every LogRecord has (anything else on a record came from `extra=`, or Django's
# `request` and `status_code`); shared with agentplatform.ops.logs.RedactingFilter.
LOG_RECORD_ATTRIBUTES = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}
# ... and the correlation ids, hex, which a digit-run rule could garble.
_NOT_MASKED = LOG_RECORD_ATTRIBUTES | {"request_id", "run_id", "conversation_id", "tool_call_id", "user_id", "tenant"}
