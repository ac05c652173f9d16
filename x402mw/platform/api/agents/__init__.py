"""The merchant API's agent-payment resources, under ``/v1/agent``: endpoints sold per request
(`endpoints`), challenges sellers issued (`challenges`), settlements and their usage
(`settlements`) and sign-in-with-x checks (`sign_ins`). The facilitator API (``/v1/x402``) is
`x402mw.platform.api.facilitator`."""
