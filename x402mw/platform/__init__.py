"""The x402mw platform: merchant API, agent settlement, relayer, chain access, worker.

Installed with the ``platform`` extra. Start it with ``x402mw platform serve``, or build the
Starlette app yourself with `x402mw.platform.app.create_app`.
"""
