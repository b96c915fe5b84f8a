"""Masking of free text: every text that leaves the platform or is stored from a user goes through
`mask_text`: text leaves the platform only through masking.

What is masked, wherever it appears in a string (not only under a telling key):

| what | shape recognised | becomes |
| --- | --- | --- |
| confirmation token, API key | `ct_` + 16 or more URL-safe characters; `ap_` + 32 or more hex digits | `[redacted token]` |
| payment card | 13-19 digits, optionally grouped by single spaces or dashes | first 4 + `****` + last 4 digits |
| national id (PRC resident id) | 17 digits + a digit or X | first 4 + `****` + last 4 |
| US social security number | `123-45-6789` | `***-**-6789` |
| phone number | PRC mobile `1[3-9]` + 9 digits (optionally `+86`, spaces or dashes), or `+` country code and 7-13 digits | first 3 + `****` + last 4 digits |
| email address | `local@domain.tld` | first character of the local part + `***@` + the domain |
| card verification code | 3-4 digits after `CVV`, `CVC`, `CVV2`, `CVN`, `CSC`, `security code`, `card verification code`, `安全码`, `卡验证码`, `背面三位`; after `CID`, `code`, `验证码`, `校验码` only near a card | `***` |
| card expiry | `MM/YY`, `MM-YYYY`, `MM.YY`, `YYYY/MM`, `2029年12月` after `card expiry`, `valid thru`, `good thru`, `卡有效期`; after `exp`, `expiry`, `expires`, `expiration date`, `valid through/until`, `有效期`, `到期` only near a card; right after a card number (`4111****1111 12/29 123`: the code too) | `**/**` |

"Near a card": a card number (whole, ours masked `4111****1111`, or `**** 1111`) or a word naming
one (card, Visa, credit, debit, 信用卡, 银行卡, 卡号, 尾号...) within 100 characters of the label.
Labels may be followed by `:`, `：`, `=`, `#`, "is", 为/是 and quotes, so `"cvv": "123"` in a
JSON text is masked too. Without a label or a card nearby, "123" and "12/29" are an amount and a
date and stay readable. PCI DSS 4.0 requirement 3.3.1.2 forbids storing the verification code
after authorization; the expiry is cardholder data protected with the number (requirement 3.5).

A match must stand alone (no letter, digit or `_` glued to it), so order ids (`A202607290001`), SKUs
and UUIDs stay readable; a card or phone number glued to the label that names it (`card`, `cardNo`,
`card_number`, `PAN`, `Visa`, `phone`, `tel`, `mobileNumber`, `cell`, `fax`, optionally followed
by `_` or `-`: `card4111111111111111`, `tel_13812345678`) is masked all the same, the label kept. Masked output never matches again (idempotent). Lives in the base layer
because every app, down to `audit`, uses it.
"""
from __future__ import annotations

import logging
import re
from typing import Any

TOKEN = re.compile(r"\b(?:ct_[A-Za-z0-9_\-]{16,}|ap_[0-9a-f]{32,})")
# A match must not be glued to an ASCII letter, digit or "_" (order ids, SKUs, UUIDs), but may be to
# a Chinese word: "卡号4111111111111111" and "电话13812345678联系" are written without spaces.
_WORD = r"[A-Za-z\d_]"
_EDGE_BEFORE = r"(?<![A-Za-z\d_\-+])"
_EDGE_AFTER = r"(?!" + _WORD + ")"
NATIONAL_ID = re.compile(_EDGE_BEFORE + r"\d{17}[\dXx]" + _EDGE_AFTER)
SSN = re.compile(_EDGE_BEFORE + r"\d{3}-\d{2}-\d{4}" + r"(?![A-Za-z\d_\-])")
# The usual groupings first (4-4-4-4[-3], Amex 4-6-5, no separator), so the expiry or code copied
# after a number ("4111 1111 1111 1111 12/29") is not read as more of its digits; then any grouping.
CARD = re.compile(_EDGE_BEFORE + r"(?:\d{4}([ \-])\d{4}\1\d{4}\1\d{4}(?:\1\d{3})?|\d{4}([ \-])\d{6}\2\d{5}"
                  r"|\d{13,19}|\d(?:[ \-]?\d){12,18})" + r"(?![A-Za-z\d_\-])")
PHONE = re.compile(_EDGE_BEFORE + r"(?:(?:\+|00)86[ \-]?)?1[3-9]\d(?:[ \-]?\d){8}(?![A-Za-z\d_\-])"
                   r"|" + _EDGE_BEFORE + r"\+\d{1,3}(?:[ \-]?\d){7,13}(?![A-Za-z\d_\-])")
# The same numbers glued to the label that names them ("card4111111111111111", "cardNo_4111...",
# "PAN-4111...", "phone13812345678", "tel_138...", "mobileNumber138..."): the edge rule above keeps ids such as
# "A202607290001" readable, so a number glued to ASCII letters is masked only after one of these
# labels (the label kept, the number masked as above).
_NUMBER_WORD = r"(?:[_\-]?(?:no|num|number|nr))?"  # "cardNo", "card_number", "phone-num"
CARD_AFTER_LABEL = re.compile(r"(?i:((?:card|pan)" + _NUMBER_WORD + r"|visa|mastercard|amex|unionpay))([_\-]?)"
                              r"(\d(?:[ \-]?\d){12,18})(?![A-Za-z\d_\-])")
PHONE_AFTER_LABEL = re.compile(r"(?i:((?:tel|phone|mobile|mob|cell|fax)" + _NUMBER_WORD + r"|whatsapp|wechat))([_\-]?)"
                               r"((?:(?:\+|00)86[ \-]?)?1[3-9]\d(?:[ \-]?\d){8}|\+\d{1,3}(?:[ \-]?\d){7,13})"
                               r"(?![A-Za-z\d_\-])")


_ANY_DIGIT = re.compile(r"\d")
EMAIL = re.compile(r"(?<![\w.%+\-])([A-Za-z0-9._%+\-]+)@([A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,})(?![\w\-])")


def _digits(text: str) -> str:
    return re.sub(r"\D", "", text)


def _keep_ends(match: re.Match, group: int = 0) -> str:
    raw = match.group(group)
    digits = re.sub(r"[^\dXx]", "", raw)
    return digits[:4] + "****" + digits[-4:]


def _phone(match: re.Match, group: int = 0) -> str:
    digits = _digits(match.group(group))
    return digits[:3] + "****" + digits[-4:]


def mask_text(text: str, *, context: str = "") -> str:
    """`text` with tokens, card numbers, national ids, SSNs, phone numbers, email addresses and the
    card data beside a card number masked (table above).

    `context`: the masked text that came just before `text` in the same stream (EventRecorder), so
    a card named in an earlier piece still makes "exp 12/29" in this one card data. Non-strings are
    returned unchanged. Costs a few microseconds for a short text with no digits.
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
    text = PHONE_AFTER_LABEL.sub(lambda m: m.group(1) + m.group(2) + _phone(m, 3), text)
    text = PHONE.sub(_phone, text)
    text = CARD_AFTER_LABEL.sub(lambda m: m.group(1) + m.group(2) + _keep_ends(m, 3), text)
    text = CARD.sub(_keep_ends, text)
    return _mask_card_data(text, context=context)

# Card data beside the number (PCI DSS 4.0 requirement 3.3.1.2: the card verification code is never
# stored after authorization; requirement 3.2/3.5: the expiry date is cardholder data, protected with
# the PAN). A value is masked by its label, never by its shape alone: "123" and "12/29" are ordinary
# amounts and dates until a label (or a card number right before them) says otherwise.
_LABEL_GAP = r"""\s*["'“”]?\s*(?:[:：=#]|\bis\b|为|是)?\s*["'“”]?\s*"""  # "CVV: 123", "cvc=1234", JSON
# A verification code is secret whatever surrounds it: these labels mask on their own ...
_CVV_LABELS = (r"cvv[2２]?|cvc[2２]?|cvn[2２]?|cav2|cvd|csc|card[\s_\-]*verification[\s_\-]*(?:code|value|number)?"
               r"|(?:card[\s_\-]*)?security[\s_\-]*code|安全码|卡验证码|信用卡验证码|背面(?:的)?(?:三|3)位(?:数字|数|码)?")
# ... these only near a card (a CID or a "code" is many things).
_CVV_LABELS_NEAR_CARD = r"cid|code|验证码|校验码"
# An expiry labelled as the card's masks on its own; "exp"/"有效期" only near a card.
_EXPIRY_LABELS = (r"card[\s_\-]+exp(?:\.|iry|iration|ires)?(?:[\s_\-]+date)?|valid[\s_\-]+thru|good[\s_\-]+thru"
                  r"|(?:信用|银行|借记)?卡(?:片)?(?:的)?有效期(?:至|到)?")
_EXPIRY_LABELS_NEAR_CARD = (r"exp(?:\.|iry|iration|ires)?(?:[\s_\-]+date)?|valid[\s_\-]+(?:through|until)"
                            r"|有效期(?:至|到)?|到期(?:日|时间)?|过期(?:日|时间)?")
_CVV_VALUE = r"(?<!\d)\d{3,4}(?![A-Za-z\d_/\-*]|\.\d)"
_DATE_VALUE = (r"(?<![\d/\-.])(?:(?:0?[1-9]|1[0-2])\s?[/\-.]\s?(?:20)?\d{2}|20\d{2}\s?[/\-.]\s?(?:0?[1-9]|1[0-2])"
               r"|(?:20)?\d{2}\s?年\s?(?:0?[1-9]|1[0-2])\s?月)(?![\d/\-.]?\d)")
_LABEL_START = r"(?<![A-Za-z])"  # a label is a word of its own ("recode 123" is not "code 123")
# After a label that can only mean a verification code, the code may follow a few words later in the
# same clause ("CVV code: 123", "the CVV number is 123", "cvv (123)", "cvv-123"): anything but a
# digit, a line end, a value already masked ("*") or a clause's punctuation, up to 16 characters.
_CVV_GAP = r"[^\d\n*.,;!?。，；！？、]{0,16}?"
CVV_LABELLED = re.compile(_LABEL_START + r"(?i:(" + _CVV_LABELS + r")(?:码)?)" + _CVV_GAP + r"(" + _CVV_VALUE + ")")
CVV_NEAR_CARD = re.compile(_LABEL_START + r"(?i:(" + _CVV_LABELS_NEAR_CARD + "))" + _LABEL_GAP
                           + r"(" + _CVV_VALUE + ")")
EXPIRY_LABELLED = re.compile(_LABEL_START + r"(?i:(" + _EXPIRY_LABELS + "))" + _LABEL_GAP + r"(" + _DATE_VALUE + ")")
EXPIRY_NEAR_CARD = re.compile(_LABEL_START + r"(?i:(" + _EXPIRY_LABELS_NEAR_CARD + "))" + _LABEL_GAP
                              + r"(" + _DATE_VALUE + ")")
# A card number, whole or masked (ours: 4111****1111; others': **** 1111), or a word naming a card.
CARD_CONTEXT = re.compile(r"\d{4}\*{4}\d{4}|\*{4}[ \-]?\d{4}|(?<![A-Za-z])(?i:card|visa|mastercard|master\s+card|amex"
                          r"|american\s+express|discover|unionpay|jcb|credit|debit|pan)(?![A-Za-z])"
                          r"|信用卡|银行卡|借记卡|储蓄卡|卡号|银联|尾号")
# The number followed by its expiry (and code), as a card is copied: "4111****1111 12/29 123".
AFTER_CARD_NUMBER = re.compile(r"(?:(?:\d{4}|\*{4}[ \-]?)\*{0,4}\d{4}[\s,;|]{1,3})(?:(?P<date>" + _DATE_VALUE
                               + r")(?:[\s,;|]{1,3}(?P<code>" + _CVV_VALUE + r"))?|(?P<code_first>" + _CVV_VALUE
                               + r")[\s,;|]{1,3}(?P<date_last>" + _DATE_VALUE + "))")
AFTER_CARD_DATA = re.compile(r"(?<![\w*])(?:\*\*\*|\*\*/\*\*)[\s,;|]{1,3}(?:(?P<date>" + _DATE_VALUE + r")|(?P<code>"
                             + _CVV_VALUE + r"))")
# Every rule below needs one of these (a strong label, a card named, or a card number or value
# already masked): without any, the regular expressions are not run at all.
_CARD_DATA_HINTS = ("cv", "csc", "cav", "secur", "verif", "thru", "card", "visa", "master", "amex", "american",
                    "discover", "unionpay", "jcb", "credit", "debit", "pan", "***", "安全码", "验证码", "卡", "背面",
                    "银联", "尾号")
_NEAR = 100  # characters either side of a label searched for a card


def _mask_card_data(text: str, *, context: str = "") -> str:
    """`text` (already masked otherwise) with verification codes and expiry dates near a card
    masked; `context`: the masked text that came before it in the same stream (a card named there
    counts as near)."""
    full, offset = context + text, len(context)
    lowered = full.lower()
    if not any(word in lowered for word in _CARD_DATA_HINTS):
        return text  # the common case (a tool result, an order's facts): a few substring scans
    spans: list[tuple[int, int, str]] = []  # (start, end, replacement) of values, in `full`

    def near_card(match: re.Match) -> bool:
        return CARD_CONTEXT.search(full, max(0, match.start() - _NEAR), match.end() + _NEAR) is not None

    for pattern, needs_card, hidden in ((CVV_LABELLED, False, "***"), (CVV_NEAR_CARD, True, "***"),
                                        (EXPIRY_LABELLED, False, "**/**"), (EXPIRY_NEAR_CARD, True, "**/**")):
        for match in pattern.finditer(full):
            if match.end() > offset and (not needs_card or near_card(match)):
                spans.append((match.start(2), match.end(2), hidden))
    for match in AFTER_CARD_NUMBER.finditer(full):
        for group, hidden in (("date", "**/**"), ("code", "***"), ("code_first", "***"), ("date_last", "**/**")):
            if match.group(group):
                spans.append((match.start(group), match.end(group), hidden))
    text = _apply(full, offset, spans)
    # A code or an expiry written right after one just masked ("cvv ***, 12/29"): the same card's.
    full = context + text
    spans = [(m.start(g), m.end(g), hidden) for m in AFTER_CARD_DATA.finditer(full)
             for g, hidden in (("date", "**/**"), ("code", "***")) if m.group(g)]
    return _apply(full, offset, spans)


def _apply(full: str, offset: int, spans: list[tuple[int, int, str]]) -> str:
    """full[offset:] with each (start, end, replacement) span (in `full`) replaced."""
    out, cursor = [], offset
    for start, end, hidden in sorted(s for s in set(spans) if s[0] >= offset):
        if start < cursor:  # overlapping rules: the first one masked it
            continue
        out.extend([full[cursor:start], hidden])
        cursor = end
    out.append(full[cursor:])
    return "".join(out)


def mask_json(value: Any) -> Any:
    """A copy of a JSON-shaped value with `mask_text` applied to every string (keys kept)."""
    if isinstance(value, str):
        return mask_text(value)
    if isinstance(value, dict):
        return {k: mask_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [mask_json(v) for v in value]
    return value


# What a stream may still be in the middle of: a digit run (card, id, phone, with the expiry and
# code copied after a card: "4111****1111 12/2"), a token prefix, an email address, or a card-data
# label with its value still coming ("cvv 12", "有效期 12/", "secur").
_HELD_LABELS = ("cvv2", "cvc2", "cvn2", "cav2", "cvd", "csc", "cid", "code", "security code", "card security code",
                "card verification code", "card verification value", "card expiry", "card expiration date",
                "expiry date", "expiration date", "exp date", "valid thru", "valid through", "valid until",
                "good thru", "安全码", "验证码", "校验码", "有效期", "到期", "过期", "背面三位")
_LABEL_PREFIXES = sorted({label[:n] for label in _HELD_LABELS for n in range(1, len(label) + 1)}, key=len,
                         reverse=True)
_OPEN_TAIL = re.compile(
    r"(?:[+\d*][\d \-/*]*[Xx]?|\bc|\bct|\bct_[A-Za-z0-9_\-]*|[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]*"
    r"|(?<![A-Za-z])(?i:" + "|".join(re.escape(p).replace(r"\ ", r"[\s_\-]") for p in _LABEL_PREFIXES) + r")$"
    r"|(?<![A-Za-z])(?i:" + "|".join((_CVV_LABELS, _CVV_LABELS_NEAR_CARD, _EXPIRY_LABELS, _EXPIRY_LABELS_NEAR_CARD))
    + r")(?:码)?" + _LABEL_GAP + r"[\d/\-.年月 ]*)$")


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


# A confirmation token as a requester may paste it (`ct_` and at least 16 URL-safe characters), and
# the looser shape the offline planner removes from what it echoes (`ct_` and anything URL-safe).
_CONFIRMATION_TOKEN = re.compile(r"\bct_[A-Za-z0-9_\-]{16,}")
_CONFIRMATION_TOKEN_PREFIX = re.compile(r"\bct_[A-Za-z0-9_\-]*")


def redact_tokens(text: str, *, placeholder: str = "[redacted token]", any_length: bool = False) -> str:
    """`text` with anything shaped like a confirmation token replaced by `placeholder`.

    A user who pastes a token into a chat message must not send it to the model, the memory or a
    stored reason: the token proves a person's consent and never goes into a prompt. any_length:
    also replace a bare `ct_` prefix or a short fragment (the offline planner, which quotes the
    user back). Only confirmation tokens: `mask_text` masks the rest.
    """
    pattern = _CONFIRMATION_TOKEN_PREFIX if any_length else _CONFIRMATION_TOKEN
    return pattern.sub(placeholder, text)


# -- a model provider's error message ------------------------------------------------------------

# A provider's error text may quote the request: its key, a bearer header, opaque ids, the prompt.
_KEYLIKE = re.compile(r"(?i)\b((?:sk|pk|rk|ak|key|tok)[-_][A-Za-z0-9_\-]{4})[A-Za-z0-9_\-.*]{4,}")
_BEARER = re.compile(r"(?i)\bBearer\s+\S+")
_LONG_OPAQUE = re.compile(r"\b[A-Za-z0-9_\-]{32,}\b")
LONG_DIGITS = re.compile(r"(?<![\w])\d{13,19}(?![\w])")  # card numbers, long ids
PROVIDER_MESSAGE_CHARS = 300


def mask_provider_text(text: str, *, api_key: str) -> str:
    """A model provider's own error message, safe to show an operator.

    text: the message, already cleaned of characters PostgreSQL cannot store
    (`core.text.storable_text`). api_key: the key the request was sent with ("" for
    none); masked to its first 3 characters when 8 or longer. Key-like and long opaque tokens and
    card-like digit runs keep their first 4 characters; a bearer credential is hidden; then
    `mask_text` applies (a provider may echo the prompt: phones, card data). Whitespace runs
    become one space. Returns at most PROVIDER_MESSAGE_CHARS characters (plus "…" when cut).
    """
    if api_key and len(api_key) >= 8:
        text = text.replace(api_key, api_key[:3] + "****")
    text = _BEARER.sub("Bearer ****", text)
    text = _KEYLIKE.sub(lambda m: m.group(1) + "****", text)
    text = _LONG_OPAQUE.sub(lambda m: m.group(0)[:4] + "****", text)
    text = LONG_DIGITS.sub(lambda m: m.group(0)[:4] + "****", text)
    text = mask_text(" ".join(text.split()))
    return text[:PROVIDER_MESSAGE_CHARS] + ("…" if len(text) > PROVIDER_MESSAGE_CHARS else "")
