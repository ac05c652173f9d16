"""Sell an existing HTTP API without touching its code.

``x402mw gateway`` is `x402mw.gateway.app.GatewayApp`, a reverse proxy over the payment gate,
configured from a TOML file (`x402mw.gateway.config.load_config`), its agent endpoints kept in line
with the file at start (`x402mw.gateway.endpoints.provision`); ``x402mw check`` checks a seller's
402s against x402 v2 (`x402mw.gateway.check.check_urls`). Nothing is imported here, so that the
command line starts without loading the proxy.
"""
