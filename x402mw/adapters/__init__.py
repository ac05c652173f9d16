"""Thin framework adapters over `x402mw.seller`: each translates its framework's request into a
`RequestView` and the gate's decision back into a response. Import the one you need:
``x402mw.adapters.asgi``, ``.starlette``, ``.flask``, ``.django``, ``.wsgi``."""
