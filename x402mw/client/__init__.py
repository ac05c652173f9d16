"""The paying side of x402: a `Wallet` and `X402Auth`, an ``httpx.Auth`` that pays 402 answers.

>>> import httpx
>>> from x402mw.client import Wallet, X402Auth
>>> auth = X402Auth(Wallet.from_env(), max_amount="0.10", max_total="5")
>>> httpx.get("https://api.example.com/weather", auth=auth)

The ``x402mw pay URL`` command is in :mod:`x402mw.client.pay`.
"""

from __future__ import annotations

from x402mw.client.auth import PaymentRecord, X402Auth
from x402mw.client.wallet import Wallet

__all__ = ["PaymentRecord", "Wallet", "X402Auth"]
