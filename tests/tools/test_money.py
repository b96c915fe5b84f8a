"""tools.money: one canonical form per amount, refusals with stable codes, display with currency."""
from __future__ import annotations

from decimal import Decimal

import pytest

from tools.money import MoneyInvalid, format_money, money, normalize_amount


@pytest.mark.parametrize("spelling", ["1e2", "100", "100.0", "100.00", "100.000", 100, 100.0, Decimal("1E+2")])
def test_spellings_of_one_amount_normalise_to_one_value(spelling):
    value = normalize_amount(spelling, currency="CNY")
    assert value == Decimal("100") and str(value) == "100.00"


def test_the_minor_unit_depends_on_the_currency():
    assert str(normalize_amount("1.2e2", currency="JPY")) == "120"
    assert str(normalize_amount("7", currency="usd")) == "7.00"
    assert str(normalize_amount("7", currency=None)) == "7.00"  # unknown order: the default exponent


@pytest.mark.parametrize(("value", "currency", "reason"), [
    ("10.005", "CNY", "AMOUNT_TOO_PRECISE"),
    ("100.5", "JPY", "AMOUNT_TOO_PRECISE"),
    ("0.001", "USD", "AMOUNT_TOO_PRECISE"),
    ("NaN", "CNY", "AMOUNT_NOT_FINITE"),
    ("Infinity", "CNY", "AMOUNT_NOT_FINITE"),
    ("-1", "CNY", "AMOUNT_NOT_POSITIVE"),
    ("0", "CNY", "AMOUNT_NOT_POSITIVE"),
    ("ten", "CNY", "AMOUNT_NOT_A_NUMBER"),
    ("1e30", "CNY", "AMOUNT_TOO_LARGE"),
])
def test_amounts_that_are_not_money_are_refused_never_rounded(value, currency, reason):
    with pytest.raises(MoneyInvalid) as caught:
        normalize_amount(value, currency=currency)
    assert caught.value.reason == reason and caught.value.field == "amount"
    assert caught.value.code == "INVALID_ARGUMENTS"


def test_display_has_the_currency_and_its_minor_digits():
    assert format_money(Decimal("1234.5"), "CNY") == "CNY 1,234.50"
    assert format_money("1200", "JPY") == "JPY 1,200"
    assert money("560", "cny") == {"amount": "560.00", "currency": "CNY", "display": "CNY 560.00"}
