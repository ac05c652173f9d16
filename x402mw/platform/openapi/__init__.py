"""The OpenAPI 3.1 document of the platform (``GET /v1/openapi.json``) and the API reference page
rendered from it (``python -m x402mw.platform.openapi.reference``).

`document` builds the document: operations (`operations`, and per family `payments`, `links`,
`subscriptions`, `checkout`), request bodies from the pydantic models the handlers validate
(`models`), answers from the response models they serialise (`answers`), and the shared schema
pieces (`schemas`). It sits above the surfaces it describes (`api`, `checkout`); nothing below
imports it.
"""
