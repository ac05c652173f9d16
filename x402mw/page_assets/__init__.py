"""What the payer's browser runs on both pages that take a wallet payment: the wallet script
(``wallet.js``: connect, switch chain, sign) and the page styles (``checkout.css``).

The hosted checkout serves them as files (``/checkout/static/``, `x402mw.platform.checkout.assets`);
the seller's paywall inlines them in its 402 page (`x402mw.seller.paywall`). Both read them from
here, so that neither reaches into the other's package.
"""

from __future__ import annotations

from pathlib import Path

STATIC_DIR = Path(__file__).resolve().parent / "static"


def read_asset(name: str) -> str:
    """The text of the shared file ``name`` (``wallet.js``, ``checkout.css``)."""
    return (STATIC_DIR / name).read_text()
