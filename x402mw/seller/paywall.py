"""The browser paywall: the 402 of a paid route as an HTML page a person can pay from.

A request whose ``Accept`` names ``text/html`` gets the same 402 (status, ``PAYMENT-REQUIRED``)
with this page as its body: what is sold, the price in the token's own decimals, and a wallet
button that signs the EIP-3009 authorization (gasless), retries the URL with ``PAYMENT-SIGNATURE``
and shows the paid response. With sign-in-with-x on the route, "I already paid" signs in instead.
The page is self-contained: the wallet code and styles it shares with the hosted checkout inlined
(`x402mw.page_assets`, read once), its scripts and styles allowed by hash, no request to another host.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from x402mw.errors import ConfigurationError
from x402mw.page_assets import read_asset
from x402mw.protocol.networks import get_network

_OWN_STATIC = Path(__file__).resolve().parent / "paywall_static"
_EXTRA_CSS = """
.brand{display:flex;gap:.75rem;align-items:center;padding-bottom:.75rem;margin-bottom:.75rem;
border-bottom:1px solid var(--line)}
.brand .merchant{margin:0;color:var(--text);font-size:1.1rem}
.logo{display:block;flex:none;max-height:3rem;max-width:6rem;margin:0}
.description{margin:.15rem 0 0;font-size:.9rem}
.network{margin:.25rem 0 0}
.result pre{white-space:pre-wrap;word-break:break-word;overflow:auto;max-height:60vh;margin:0}
.actions{display:flex;flex-wrap:wrap;gap:.5rem}
"""


def wants_html(accept: str | None) -> bool:
    """Whether an ``Accept`` header asks for a page (browsers do; agents and fetch() do not)."""
    return accept is not None and "text/html" in accept


@dataclass(frozen=True, slots=True)
class Paywall:
    """What the paywall page shows of the seller: ``name``, a ``logo`` (a path on the seller's own
    site, or a ``data:image/`` URL: nothing is loaded from another host) and a ``description``.
    ``enabled=False`` keeps browsers on the plain JSON 402."""

    name: str | None = None
    logo: str | None = None
    description: str | None = None
    enabled: bool = True
    _assets: dict[str, str] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        problems = []
        for key, limit in (("name", 200), ("description", 1000), ("logo", 100_000)):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, str) or not value.strip() or len(value) > limit):
                problems.append(f"Paywall.{key} must be text of at most {limit} characters")
        if isinstance(self.logo, str) and not (
            (self.logo.startswith("/") and not self.logo.startswith("//")) or self.logo.startswith("data:image/")
        ):
            problems.append("Paywall.logo must be a path on this site (/logo.png) or a data:image/ URL")
        if problems:
            raise ConfigurationError(problems)

    def _load(self) -> dict[str, str]:
        if not self._assets:
            css = read_asset("checkout.css") + _EXTRA_CSS
            js = read_asset("wallet.js") + "\n" + (_OWN_STATIC / "paywall.js").read_text()
            self._assets.update(
                css=css,
                js=js,
                csp=(
                    "default-src 'none'; "
                    f"script-src {_hash(js)}; style-src {_hash(css)}; img-src 'self' data: blob:; "
                    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
                ),
            )
        return self._assets

    def headers(self) -> list[tuple[str, str]]:
        """The headers of the page's answer (besides the 402's own)."""
        return [
            ("Content-Type", "text/html; charset=utf-8"),
            ("Content-Security-Policy", self._load()["csp"]),
            ("X-Content-Type-Options", "nosniff"),
            ("Referrer-Policy", "no-referrer"),
        ]

    def render(self, required: dict[str, Any], *, decimals: int, currency: str, livemode: bool) -> bytes:
        """The page for one 402 (``required`` is its ``PaymentRequired``)."""
        assets = self._load()
        offer = required["accepts"][0]
        resource = required.get("resource") or {}
        sold = str(resource.get("description") or "this resource")
        price = _decimal_text(int(offer["amount"]), decimals)
        name = self.name or ""
        logo = f'<img class="logo" src="{_e(self.logo)}" alt="{_e(name or "Seller")} logo">' if self.logo else ""
        description = f'<p class="description muted">{_e(self.description)}</p>' if self.description else ""
        brand = f'<div class="brand">{logo}<div><p class="merchant">{_e(name)}</p>{description}</div></div>'
        network = network_text(str(offer.get("network", "")))
        signs_in = "sign-in-with-x" in (required.get("extensions") or {})
        sign_in = (
            '<button type="button" class="button secondary" id="wallet-sign-in">I already paid</button>'
            if signs_in
            else ""
        )
        badge = "" if livemode else '<p class="badge">Test network: no real money moves</p>'
        data = json.dumps(required, separators=(",", ":"), ensure_ascii=True).replace("<", "\\u003c")
        page = (
            '<!doctype html><html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            '<meta name="robots" content="noindex, nofollow"><link rel="icon" href="data:,">'
            f"<title>Pay {_e(price)} {_e(currency)} for {_e(sold)}</title>"
            f"<style>{assets['css']}</style></head><body>"
            '<main class="card" id="paywall"><header class="header">'
            f"{badge}{brand if (name or logo or description) else ''}"
            f'<p class="purchase" id="purchase">{_e(sold)}</p>'
            f'<h1 class="amount"><span id="price">{_e(price)}</span> <span class="coin">{_e(currency)}</span></h1>'
            f'<p class="network muted small" id="network">{_e(network)}</p>'
            "</header>"
            '<section class="panel" id="offer" aria-labelledby="offer-title">'
            '<h2 id="offer-title" class="visually-hidden">Payment</h2>'
            '<p class="muted small">Payment required to open this page. Your wallet signs the payment; '
            "you pay no network fee.</p>"
            '<div class="actions"><button type="button" class="button" id="wallet-pay">Pay with wallet</button>'
            f"{sign_in}</div>"
            '<p id="wallet-message" class="small" role="status" aria-live="polite"></p></section>'
            '<section class="panel result" id="result" hidden aria-labelledby="result-title">'
            '<h2 id="result-title" tabindex="-1">Paid: here it is</h2><pre id="result-body"></pre></section>'
            '<noscript><p class="problem">Paying here needs JavaScript and a browser wallet.</p></noscript>'
            "</main>"
            '<footer class="footer">Payments by x402</footer>'
            f'<script type="application/json" id="x402-required">{data}</script>'
            f"<script>{assets['js']}</script></body></html>"
        )
        return page.encode()


def network_text(network: str) -> str:
    """Where the payment is made, for a person: ``on Base (eip155:8453)``, or the CAIP-2 id alone for
    a chain this process has no name for."""
    known = get_network(network) if network else None
    return f"on {known.name} ({network})" if known else f"on network {network}"


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def _decimal_text(amount: int, decimals: int) -> str:
    """``amount`` atomic units as a decimal in the token's own decimals, trailing zeros kept to two."""
    value = Decimal(amount).scaleb(-decimals)
    text = f"{value:f}"
    if "." in text:
        whole, fraction = text.split(".")
        fraction = fraction.rstrip("0").ljust(2, "0")
        text = f"{whole}.{fraction}"
    return text
