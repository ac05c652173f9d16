"""Comparing secrets in constant time, whatever a request sent in their place.

`hmac.compare_digest` takes two ``str`` only when both are ASCII and raises ``TypeError`` otherwise;
a token, seal or code from a request may hold any character. `same_secret` compares the UTF-8
bytes instead (a lone surrogate, which no UTF-8 holds, kept as its own bytes), so that any text is
merely a wrong secret. Every comparison of secrets in the package goes through it.
"""

from __future__ import annotations

import hmac


def same_secret(given: str | bytes, expected: str | bytes) -> bool:
    """Whether ``given`` is ``expected``, in time that does not depend on where they differ."""
    return hmac.compare_digest(_bytes(given), _bytes(expected))  # noqa: TID251 (bytes only)


def _bytes(value: str | bytes) -> bytes:
    return value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value
