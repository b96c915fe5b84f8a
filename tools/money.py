"""Money in one canonical form.

A money argument is a `Decimal` normalised to its currency's minor unit (ISO 4217 exponent)
*before* it is hashed, shown to a human or executed: `1e2`, `100`, `100.0` and `100.00` are one
amount (`Decimal("100.00")` in CNY) with one arguments hash. More precision than the currency has
(`10.005` CNY, `100.5` JPY) is refused with a stable code, never rounded silently; NaN, Infinity,
zero and negative amounts are refused too.

Display is "CNY 1,234.50": the ISO code, then the amount with its minor-unit digits (no locale
library: one format everybody reads the same way).
"""
from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from tools.errors import ToolValidationError

# ISO 4217 minor-unit exponents of the currencies the catalog uses; an unlisted code uses
# DEFAULT_EXPONENT. Three-decimal currencies (KWD, BHD, ...) are not supported: our money columns
# hold two decimal places.
MINOR_UNITS: dict[str, int] = {
    "CNY": 2, "USD": 2, "EUR": 2, "GBP": 2, "HKD": 2, "SGD": 2, "AUD": 2, "CAD": 2, "CHF": 2,
    "JPY": 0, "KRW": 0,
}
DEFAULT_CURRENCY = "CNY"
DEFAULT_EXPONENT = 2


class MoneyInvalid(ToolValidationError):
    """A money argument that cannot be normalised. Becomes INVALID_ARGUMENTS; `reason` is the
    stable sub-code (AMOUNT_TOO_PRECISE, AMOUNT_NOT_FINITE, AMOUNT_NOT_POSITIVE, AMOUNT_NOT_A_NUMBER,
    AMOUNT_TOO_LARGE)
    and `field` the argument's name, both reported in the result's `data.errors`."""

    def __init__(self, message: str, *, reason: str, field: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.field = field


def exponent(currency: str | None) -> int:
    """The ISO 4217 minor-unit exponent of `currency` (2 for an unknown or missing code)."""
    return MINOR_UNITS.get((currency or "").upper(), DEFAULT_EXPONENT)


def normalize_amount(value: Any, *, currency: str | None, field: str = "amount") -> Decimal:
    """Return `value` as a Decimal with exactly the currency's minor-unit digits.

    value: Decimal, int, float or numeric string. currency: ISO 4217 code (None: the default
    exponent 2). Raises MoneyInvalid (reason AMOUNT_NOT_A_NUMBER, AMOUNT_NOT_FINITE,
    AMOUNT_NOT_POSITIVE, AMOUNT_TOO_PRECISE, AMOUNT_TOO_LARGE). Examples: ("1e2", CNY) -> 100.00; ("10.000", CNY)
    -> 10.00; ("10.005", CNY) and ("100.5", JPY) -> AMOUNT_TOO_PRECISE.
    """
    try:
        amount = value if isinstance(value, Decimal) else Decimal(str(value))
    except (InvalidOperation, ValueError, TypeError):
        raise MoneyInvalid(f"{field} must be a decimal number", reason="AMOUNT_NOT_A_NUMBER", field=field) from None
    if not amount.is_finite():
        raise MoneyInvalid(f"{field} must be a finite number", reason="AMOUNT_NOT_FINITE", field=field)
    if amount <= 0:
        raise MoneyInvalid(f"{field} must be greater than 0", reason="AMOUNT_NOT_POSITIVE", field=field)
    digits = exponent(currency)
    quantum = Decimal(1).scaleb(-digits)
    try:
        canonical = amount.quantize(quantum)
    except InvalidOperation:  # more digits than the context can hold: absurdly large
        raise MoneyInvalid(f"{field} is too large", reason="AMOUNT_TOO_LARGE", field=field) from None
    if canonical != amount:
        code = (currency or DEFAULT_CURRENCY).upper()
        raise MoneyInvalid(
            f"{field} has more decimal places than {code} allows ({digits}); send e.g. {canonical}",
            reason="AMOUNT_TOO_PRECISE", field=field)
    return canonical


def minor_units(amount: Any, currency: str | None) -> int:
    """`amount` as an integer count of the currency's minor unit (ISO 4217 exponent): ("10.00",
    CNY) -> 1000, (1200, JPY) -> 1200. How amounts are compared (an approver's edit may only lower
    one). Raises MoneyInvalid as `normalize_amount` (an amount finer than the currency allows is
    refused, never rounded)."""
    canonical = normalize_amount(amount, currency=currency)
    return int(canonical.scaleb(exponent(currency)))


def format_money(amount: Any, currency: str | None) -> str:
    """'CNY 1,234.50' / 'JPY 1,200': ISO code, thousands separators, the currency's minor digits."""
    code = (currency or DEFAULT_CURRENCY).upper()
    digits = exponent(code)
    value = Decimal(str(amount)).quantize(Decimal(1).scaleb(-digits))
    return f"{code} {value:,.{digits}f}"


def money(amount: Any, currency: str | None) -> dict[str, str]:
    """The JSON shape of an amount in an approval context: {"amount", "currency", "display"}."""
    code = (currency or DEFAULT_CURRENCY).upper()
    digits = exponent(code)
    value = Decimal(str(amount)).quantize(Decimal(1).scaleb(-digits))
    return {"amount": str(value), "currency": code, "display": format_money(value, code)}
