"""Prices and amounts as exact decimals.

A price is given as ``"$0.01"`` (US dollars, paid in USDC), ``"0.01 USDC"`` / ``"0.01 EURC"``,
a `Decimal` amount of the token, or an ``int`` of atomic (minor) units. It is turned into integer
atomic units once, at configuration time; more precision than the token has is an error, never
rounded away. Floats are refused.

Every amount written as text, here and in the platform's API, follows one grammar
(`decimal_pattern`): ASCII digits, no sign, no exponent, no white space, no leading zero, and an
optional ``.`` followed by at least one digit (``"25.00"``, ``"0.5"``; not ``" 1 "``, ``"１"``,
``"1."``, ``".5"``, ``"+1"`` or ``"01"``). `AmountFormat` adds the bounds an API puts on an amount
and gives the pattern its OpenAPI document publishes, so the document and the parser cannot differ.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Context, Decimal, InvalidOperation

from x402mw.errors import PriceError

Price = str | int | Decimal
_EXACT = Context(prec=200)  # wide enough that scaling never rounds
MAX_TEXT = 80  # longer decimal text is refused before it is read


def decimal_pattern(decimals: int | None = None) -> str:
    """The grammar of an amount written as text, as a regular expression (no anchors): a whole
    number without a leading zero, and optionally ``.`` and 1 to ``decimals`` digits (any number
    of digits when ``decimals`` is None).

    >>> decimal_pattern(6)
    '(?:0|[1-9][0-9]*)(?:\\\\.[0-9]{1,6})?'
    """
    fraction = "[0-9]+" if decimals is None else f"[0-9]{{1,{decimals}}}"
    return rf"(?:0|[1-9][0-9]*)(?:\.{fraction})?"


_DECIMAL = re.compile(decimal_pattern())


class JsonNumber(str):
    """The exact text of a JSON number with a fraction or an exponent, as a parser hands it over
    with ``json.loads(data, parse_float=JsonNumber)``: still a ``str`` wherever it goes, but
    `parse_decimal` reads it by its value, as JSON defines numbers (``1e3`` is 1000), while a
    JSON string must follow `decimal_pattern`. No float is ever made of it."""

    __slots__ = ()


def json_number(text: str) -> int | JsonNumber:
    """A ``parse_float`` hook for ``json.loads``: a JSON number with a fraction or an exponent whose
    value is a whole number (``2775.0``, ``1e3``) is that ``int``, as JSON Schema counts it an
    integer; any other is its `JsonNumber` text. Never a float."""
    try:
        value = Decimal(text)
    except InvalidOperation:  # not a number: json.loads only hands over numbers
        return JsonNumber(text)
    if value.is_finite() and value.adjusted() < 30 and value == value.to_integral_value():
        return int(value)
    return JsonNumber(text)


def parse_decimal(value: object, *, field: str = "amount") -> Decimal:
    """Parse an amount exactly: a string in the grammar of `decimal_pattern` (at most 80
    characters), a `JsonNumber`, an ``int`` or a finite `Decimal`. Floats and bools are refused."""
    if isinstance(value, bool | float):
        raise PriceError(f"{field} must be a decimal string, not a float", reason="invalid_amount")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, Decimal):
        result = value
    elif isinstance(value, JsonNumber):
        try:
            result = Decimal(value)
        except InvalidOperation:
            raise PriceError(f"{field} is not a number: {value[:80]!r}", reason="invalid_amount") from None
    elif isinstance(value, str):
        if len(value) > MAX_TEXT or not _DECIMAL.fullmatch(value):
            raise PriceError(
                f'{field} is not a plain decimal number such as "12.50": {value[:80]!r}', reason="invalid_amount"
            )
        result = Decimal(value)
    else:
        raise PriceError(f"{field} must be a decimal string", reason="invalid_amount")
    if not result.is_finite():
        raise PriceError(f"{field} must be finite", reason="invalid_amount")
    return result


@dataclass(frozen=True)
class AmountFormat:
    """The amounts an API field takes: greater than zero, at most ``10 ** max_exponent``, and at most
    ``decimals`` decimals. As text they follow `decimal_pattern` with at most ``decimals`` fraction
    digits; as a `JsonNumber` or an ``int`` they are read by value.

    >>> ORDER = AmountFormat(decimals=6, max_exponent=9)
    >>> ORDER.parse("25.00"), ORDER.parse(JsonNumber("1e3"))
    (25000000, 1000000000)
    """

    decimals: int = 6
    max_exponent: int = 9

    @property
    def maximum(self) -> int:
        """The largest amount, in whole units."""
        return int(10**self.max_exponent)

    def pattern(self) -> str:
        """A regular expression (anchored) matching exactly the texts `parse` accepts: the grammar,
        with the bounds spelled out (no zero amount, nothing above `maximum`)."""
        d, digits = self.decimals, self.max_exponent

        def up_to(count: int) -> str:  # 0..count more digits
            return f"[0-9]{{0,{count}}}" if count else ""

        fraction = f"(?:\\.[0-9]{{1,{d}}})?"
        options = [f"[1-9]{up_to(digits - 1)}{fraction}"] if digits else []
        # below 1: "0." then 1..d digits not all zero (some zeros, a non-zero digit, then any digits)
        options.append("0\\.(?:" + "|".join(f"{'0' * zeros}[1-9]{up_to(d - zeros - 1)}" for zeros in range(d)) + ")")
        options.append(f"1{'0' * digits}(?:\\.0{{1,{d}}})?")  # the maximum itself
        return "^(?:" + "|".join(options) + ")$"

    def parse(self, value: object, *, field: str = "amount") -> int:
        """``value`` in atomic units (``decimals`` decimals); `PriceError` naming the rule it breaks."""
        if isinstance(value, str) and not isinstance(value, JsonNumber):
            if len(value) > MAX_TEXT or not _DECIMAL.fullmatch(value):
                raise PriceError('must be a decimal amount, e.g. "12.50"', reason="invalid_amount")
            if len(value.partition(".")[2]) > self.decimals:  # by its text: "1.0000000" is refused too
                raise PriceError(f"must have at most {self.decimals} decimals", reason="invalid_amount")
        try:
            amount = parse_decimal(value, field=field)
        except PriceError:
            raise PriceError('must be a decimal amount, e.g. "12.50"', reason="invalid_amount") from None
        if amount <= 0:
            raise PriceError("must be greater than zero", reason="invalid_amount")
        if amount > self.maximum:
            raise PriceError(f"must be at most {self.maximum}", reason="invalid_amount")
        scaled = amount.scaleb(self.decimals, context=_EXACT)
        if scaled != scaled.to_integral_value():
            raise PriceError(f"must have at most {self.decimals} decimals", reason="invalid_amount")
        return int(scaled)


def to_atomic(price: Price, *, decimals: int = 6, symbol: str = "USDC") -> int:
    """Turn a price into atomic units of a token with ``decimals`` decimals and symbol ``symbol``.

    A string is ``"$<amount>"`` (USDC only), ``"<amount>"`` or ``"<amount> <symbol>"`` (one space,
    the symbol in any case), the amount in the grammar of `decimal_pattern`.

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
    if isinstance(price, str) and not isinstance(price, JsonNumber):
        if price.startswith("$"):
            if symbol != "USDC":
                raise PriceError(f"a '$' price is paid in USDC, not {symbol}", reason="invalid_amount")
            amount = parse_decimal(price[1:], field="price")
        else:
            number, space, unit = price.partition(" ")
            if space and unit.upper() != symbol.upper():
                raise PriceError(f"price is in {unit[:20]!r}, but the token is {symbol}", reason="invalid_amount")
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
