"""The HTTP plumbing both surfaces share, the merchant API (`x402mw.platform.api`) and hosted
checkout (`x402mw.platform.checkout`): the error envelope and its exception (`errors`), request
bodies (`bodies`), the kinds of value fields take (`fields`), JSON answers from response models
(`responses`), cursor pagination (`pagination`), routes that carry their OpenAPI operation
(`routing`), static files with caching headers (`static`) and the platform a request is served by
(`state`).

Below both surfaces, which are siblings: nothing here knows a resource, and neither surface imports
the other.
"""
