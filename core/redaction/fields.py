"""Masking of personal data and secrets before anything reaches the model, logs or audit rows."""
from __future__ import annotations

import re
from typing import Any

from core.redaction.text import mask_text

SECRET_KEYS = re.compile(r"(token|secret|password|api[_-]?key|authorization|card|cvv|id_?number)", re.I)
PHONE_KEYS = re.compile(r"phone|mobile|tel", re.I)
ADDRESS_KEYS = re.compile(r"address|addr", re.I)
# Card data under its own key (PCI DSS 4.0 requirement 3.3.1.2: the verification code is never
# stored after authorization; the expiry is protected with the number). Keys are compared without
# case, "_", "-" or spaces, so `security_code`, `securityCode` and `CVV2` are one key each.
CARD_DATA_KEYS = frozenset({
    "cvv", "cvv2", "cvc", "cvc2", "cvn", "cvn2", "cvd", "csc", "cid", "cav2", "securitycode", "cardsecuritycode",
    "cardcode", "cardverificationcode", "cardverificationvalue", "cardcvv", "cardcvc", "安全码", "卡验证码",
    "expdate", "expmonth", "expyear", "cardexp", "cardexpiry", "cardexpirydate", "cardexpiration",
    "cardexpirationdate", "expirymonth", "expiryyear", "expirationmonth", "expirationyear", "validthru",
    "goodthru", "卡有效期",
})
# Keys that are an expiry only beside a card (a stock batch has an `expiry_date` too).
EXPIRY_KEYS = frozenset({"exp", "expiry", "expirydate", "expiration", "expirationdate", "expires", "validthrough",
                         "validuntil", "有效期"})
CARD_KEYS = re.compile(r"card|pan$|cvv|cvc|卡", re.I)
# A key that starts with a verification code's name is one, whatever follows ("cvc_code", "cvv_number",
# "cvv2_value"); a "verification code" is card data only beside a card (else an SMS code).
CARD_DATA_KEY_PREFIXES = ("cvv", "cvc", "cvn", "csc", "securitycode", "安全码")
VERIFICATION_KEYS = frozenset({"verificationcode", "verificationvalue", "verificationnumber", "验证码"})
_KEY_NOISE = re.compile(r"[\s_\-]")


def mask_phone(value: str) -> str:
    """'13812345678' -> '138****5678'; short values keep only the last 2 characters."""
    digits = str(value)
    if len(digits) >= 7:
        return digits[:3] + "****" + digits[-4:]
    return "*" * max(len(digits) - 2, 0) + digits[-2:]


def mask_address(value: str) -> str:
    """Keep the first 6 characters (city/district), hide the rest."""
    text = str(value)
    return text[:6] + "****" if len(text) > 6 else "****"


def _key(name: str) -> str:
    return _KEY_NOISE.sub("", str(name)).lower()


def is_card_data_key(key: str, *, beside_card: bool = False) -> bool:
    """Whether a field named `key` holds a card verification code or expiry (CARD_DATA_KEYS, or a
    name starting with CARD_DATA_KEY_PREFIXES; an EXPIRY_KEYS or VERIFICATION_KEYS name only when
    `beside_card`: a sibling field names a card)."""
    name = _key(key)
    return (name in CARD_DATA_KEYS or name.startswith(CARD_DATA_KEY_PREFIXES)
            or (beside_card and (name in EXPIRY_KEYS or name in VERIFICATION_KEYS)))


def mask_value(key: str, value: Any, *, beside_card: bool = False) -> Any:
    """Mask one value by its key name; long digit runs (cards, ids) are masked in any string.

    Card data (`is_card_data_key`) becomes "****" whatever its type (`{"cvv": 123}`, `{"exp_month": 12}`).
    """
    if isinstance(value, dict):  # {"card": {"number", "expiry"}}: the fields of a card
        return mask_mapping(value, within_card=bool(CARD_KEYS.search(str(key))))
    if isinstance(value, list):
        return [mask_value(key, v, beside_card=beside_card) for v in value]
    if value is not None and not isinstance(value, bool) and is_card_data_key(key, beside_card=beside_card):
        return "****"
    if not isinstance(value, str):
        return value
    if SECRET_KEYS.search(key):
        return "****"
    if PHONE_KEYS.search(key):
        return mask_phone(value)
    if ADDRESS_KEYS.search(key):
        return mask_address(value)
    # Free text under any other key: cards, national ids, phones and tokens wherever they appear.
    return mask_text(value)


def mask_mapping(data: dict[str, Any], *, within_card: bool = False) -> dict[str, Any]:
    """Return a masked copy of a mapping (recursively). An expiry-like key is card data beside a
    key naming a card ({"card_number", "expiry"}) or inside one ({"card": {"expiry"}}:
    `within_card`)."""
    beside_card = within_card or any(CARD_KEYS.search(str(k)) for k in data)
    return {k: mask_value(k, v, beside_card=beside_card) for k, v in data.items()}
