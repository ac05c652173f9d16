"""Prices as exact decimals.

A price is given as ``"$0.01"`` (US dollars, paid in USDC), ``"0.01 USDC"`` / ``"0.01 EURC"``,
a `Decimal` amount of the token, or an ``int`` of atomic (minor) units. It is turned into integer
atomic units once, at configuration time; more precision than the token has is an error, never
rounded away. Floats are refused.
"""

from __future__ import annotations

from decimal import Context, Decimal, InvalidOperation

from x402mw.errors import PriceError

__all__ = ["Price", "format_amount", "parse_decimal", "to_atomic"]

Price = str | int | Decimal
_EXACT = Context(prec=200)  # wide enough that scaling never rounds


def parse_decimal(value: object, *, field: str = "amount") -> Decimal:
    """Parse a decimal string or int exactly (floats and bools are refused)."""
    if isinstance(value, bool | float):
        raise PriceError(f"{field} must be a decimal string, not a float", reason="invalid_amount")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, Decimal):
        result = value
    elif isinstance(value, str):
        text = value.strip()
        if not text or len(text) > 80 or any(c in text for c in "eEnN_ "):
            raise PriceError(f"{field} is not a plain decimal number: {value!r}", reason="invalid_amount")
        try:
            result = Decimal(text)
        except InvalidOperation:
            raise PriceError(f"{field} is not a decimal number: {value!r}", reason="invalid_amount") from None
    else:
        raise PriceError(f"{field} must be a decimal string", reason="invalid_amount")
    if not result.is_finite():
        raise PriceError(f"{field} must be finite", reason="invalid_amount")
    return result


def to_atomic(price: Price, *, decimals: int = 6, symbol: str = "USDC") -> int:
    """Turn a price into atomic units of a token with ``decimals`` decimals and symbol ``symbol``.

    >>> to_atomic("$0.01")
    10000
    >>> to_atomic("0.5 EURC", symbol="EURC")
    500000
    >>> to_atomic(2500)
    2500
    """
    if isinstance(price, bool | float):
        raise PriceError("prices must not be floats; use a string such as '0.01'", reason="invalid_amount")
    if isinstance(price, int):
        if price <= 0:
            raise PriceError("price must be greater than zero", reason="invalid_amount")
        return price
    amount: Decimal
    if isinstance(price, str):
        text = price.strip()
        if text.startswith("$"):
            if symbol != "USDC":
                raise PriceError(f"a '$' price is paid in USDC, not {symbol}", reason="invalid_amount")
            amount = parse_decimal(text[1:], field="price")
        else:
            number, _, unit = text.partition(" ")
            if unit and unit.strip().upper() != symbol.upper():
                raise PriceError(f"price is in {unit.strip()}, but the token is {symbol}", reason="invalid_amount")
            amount = parse_decimal(number, field="price")
    else:
        amount = parse_decimal(price, field="price")
    if amount <= 0:
        raise PriceError("price must be greater than zero", reason="invalid_amount")
    scaled = amount.scaleb(decimals, context=_EXACT)
    if scaled != scaled.to_integral_value():
        raise PriceError(f"price {amount} has more than the {decimals} decimals {symbol} has", reason="invalid_amount")
    return int(scaled)


def format_amount(atomic: int, decimals: int = 6) -> str:
    """Atomic units as a plain decimal string: ``format_amount(10000) == "0.01"``."""
    sign = "-" if atomic < 0 else ""
    whole, frac = divmod(abs(atomic), 10**decimals)
    digits = str(frac).rjust(decimals, "0").rstrip("0") if decimals else ""
    return f"{sign}{whole}.{digits}" if digits else f"{sign}{whole}"
