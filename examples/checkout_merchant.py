"""A shop page that sells one item with the checkout button and one with the checkout panel.

The shop's server creates each payment order with the merchant client (the API key never reaches the
browser) and hands the page only what it needs: the ``checkoutUrl`` for the button, the ``paymentId``
for the panel. ``checkout.js`` comes from the platform. When checkout reports the payment, the page
asks the shop's server, which asks the platform: what was bought is granted from the order's state
(or from the ``payment_intent.succeeded`` webhook), never from the browser's callback.

Against your platform, with a test key::

    X402MW_PLATFORM_URL=http://127.0.0.1:4402/v1 X402MW_API_KEY=sk_test_... python examples/checkout_merchant.py

Without ``X402MW_API_KEY`` it starts an embedded platform (SQLite, in-process dev chain) with a test
merchant of its own. The shop listens on http://127.0.0.1:8000 (``PORT`` changes it).
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse
from starlette.routing import Route

from x402mw.client import AsyncMerchantClient
from x402mw.client.merchant import APIError


def platform_url() -> str:
    """The platform's API: ``X402MW_PLATFORM_URL`` (``X402MW_BASE_URL``, its former name, still works)."""
    return os.environ.get("X402MW_PLATFORM_URL") or os.environ.get("X402MW_BASE_URL") or "http://127.0.0.1:4402/v1"


@dataclass(frozen=True)
class Item:
    name: str
    amount: str
    currency: str = "USDC"


ITEMS = {
    "guide": Item("The x402 field guide (ebook)", "12.00"),
    "stickers": Item("Sticker pack", "3.50"),
}

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Corner Shop</title>
<link rel="icon" href="data:,">
<style>
  body {{ font: 16px/1.5 system-ui, sans-serif; max-width: 40rem; margin: 2rem auto; padding: 0 1rem; }}
  .item {{ border: 1px solid #ccc; border-radius: 8px; padding: 1rem 1.25rem; margin: 1rem 0; }}
  button {{ font: inherit; padding: 0.5rem 1rem; }}
  .done {{ color: #18794e; font-weight: 600; }}
</style>
</head>
<body>
<main>
<h1>Corner Shop</h1>
<section class="item" aria-labelledby="guide-name">
  <h2 id="guide-name">{guide_name}</h2>
  <p>{guide_amount} {guide_currency}</p>
  <button type="button" id="buy-guide">Buy with stablecoins</button>
  <p id="guide-result" role="status"></p>
</section>
<section class="item" aria-labelledby="stickers-name">
  <h2 id="stickers-name">{stickers_name}</h2>
  <p>{stickers_amount} {stickers_currency}</p>
  <button type="button" id="pay-stickers">Pay on this page</button>
  <div id="stickers-panel"></div>
  <p id="stickers-result" role="status"></p>
</section>
</main>
<script src="{checkout_js}"></script>
<script>
"use strict";
async function createOrder(item) {{
  const reply = await fetch("/orders", {{
    method: "POST",
    headers: {{"Content-Type": "application/json"}},
    body: JSON.stringify({{item}}),
  }});
  if (!reply.ok) throw new Error("The shop could not start the payment");
  return reply.json();
}}

// onComplete is feedback for the buyer only: the shop's server confirms with the platform.
async function confirmed(order, result, element) {{
  if (result.status !== "succeeded") {{
    element.textContent = "Payment not completed (" + result.status + ").";
    return;
  }}
  element.textContent = "Payment received, checking with the shop...";
  const reply = await fetch("/orders/" + encodeURIComponent(order.orderId));
  const state = await reply.json();
  element.textContent = state.paid ? "Thank you: your order is paid." : "Payment received, confirming.";
  element.className = state.paid ? "done" : "";
}}

document.getElementById("buy-guide").addEventListener("click", async () => {{
  const result = document.getElementById("guide-result");
  const order = await createOrder("guide");
  const options = {{
    checkoutUrl: order.checkoutUrl,
    onComplete: (outcome) => confirmed(order, outcome, result),
  }};
  try {{
    X402mwCheckout.open(options);                       // a popup, from this click
  }} catch (error) {{
    if (error.code !== "popup_blocked") throw error;
    X402mwCheckout.open({{...options, mode: "redirect"}}); // the browser said no: go there instead
  }}
}});

document.getElementById("pay-stickers").addEventListener("click", async (event) => {{
  event.currentTarget.hidden = true;
  const result = document.getElementById("stickers-result");
  const order = await createOrder("stickers");
  const panel = X402mwCheckout.mount(document.getElementById("stickers-panel"), {{
    paymentId: order.paymentId,
    title: "Pay for the sticker pack",
    onComplete: (outcome) => {{
      if (outcome.status === "canceled") panel.unmount();
      confirmed(order, outcome, result);
    }},
  }});
}});
</script>
</body>
</html>
"""


def create_app(base_url: str, api_key: str, checkout_js: str, shop_url: str = "") -> Starlette:
    """The shop: ``/`` (the page), ``POST /orders`` ``{"item"}`` (a new order, made on the server),
    ``GET /orders/{orderId}`` (whether the platform says it is paid). ``checkout_js`` is the URL of the
    platform's ``checkout.js``; ``shop_url`` where the buyer returns after a redirect."""
    client = AsyncMerchantClient(api_key, base_url)
    orders: dict[str, str] = {}  # orderId -> paymentId; your database in a real shop

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await client.aclose()

    async def page(request: Request) -> HTMLResponse:
        fields = {"checkout_js": checkout_js}
        for key, item in ITEMS.items():
            fields |= {f"{key}_name": item.name, f"{key}_amount": item.amount, f"{key}_currency": item.currency}
        return HTMLResponse(PAGE.format(**{k: html.escape(v) for k, v in fields.items()}))

    async def create_order(request: Request) -> JSONResponse:
        try:
            item = ITEMS[(await request.json())["item"]]
        except (ValueError, KeyError, TypeError):
            return JSONResponse({"error": "unknown item"}, status_code=400)
        back = shop_url or str(request.base_url).rstrip("/")
        order = await client.payment_intents.create(
            order_id=f"shop-{uuid.uuid4().hex[:12]}",
            amount=item.amount,
            currency=item.currency,
            success_url=f"{back}/?paid=1",
            cancel_url=f"{back}/",
            metadata={"item": item.name},
        )
        orders[order.order_id] = order.id
        return JSONResponse({"orderId": order.order_id, "paymentId": order.id, "checkoutUrl": order.checkout_url})

    async def order_state(request: Request) -> JSONResponse:
        payment_id = orders.get(request.path_params["order_id"])
        if payment_id is None:
            return JSONResponse({"error": "unknown order"}, status_code=404)
        try:
            order = await client.payment_intents.retrieve(payment_id)
        except APIError as exc:
            return JSONResponse({"error": exc.message}, status_code=502)
        return JSONResponse({"status": order.status, "paid": order.status == "succeeded"})

    return Starlette(
        routes=[
            Route("/", page),
            Route("/orders", create_order, methods=["POST"]),
            Route("/orders/{order_id}", order_state),
        ],
        lifespan=lifespan,
    )


def checkout_js_url(base_url: str) -> str:
    """Where the platform at ``base_url`` serves checkout.js, with the default checkout base."""
    from x402mw.platform.settings import default_checkout_url_base

    return default_checkout_url_base(base_url) + "/static/x402mw-checkout.js"


@contextlib.contextmanager
def embedded_platform() -> Iterator[tuple[str, str]]:
    """A platform of our own on the embedded defaults, and a test key for a new merchant."""
    import tempfile
    from pathlib import Path

    from x402mw.platform.server import PlatformServer
    from x402mw.platform.services.merchants import create_api_key, create_merchant
    from x402mw.platform.settings import PlatformSettings

    with tempfile.TemporaryDirectory() as workdir:
        settings = PlatformSettings(database_url=f"sqlite:///{Path(workdir) / 'p.sqlite3'}", data_dir=Path(workdir))
        with PlatformServer(settings) as server:
            merchant = server.call(lambda p: create_merchant(p.engine, "Corner Shop"))
            _, key = server.call(lambda p: create_api_key(p.engine, merchant.id))
            yield server.url, key


def main() -> None:
    port = int(os.environ.get("PORT", "8000"))
    with contextlib.ExitStack() as stack:
        if os.environ.get("X402MW_API_KEY"):
            base_url, key = platform_url(), os.environ["X402MW_API_KEY"]
        else:
            base_url, key = stack.enter_context(embedded_platform())
        app = create_app(base_url, key, os.environ.get("X402MW_CHECKOUT_JS") or checkout_js_url(base_url))
        print(json.dumps({"shop": f"http://127.0.0.1:{port}/", "platform": base_url}))
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
