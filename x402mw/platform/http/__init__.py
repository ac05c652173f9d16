"""The HTTP plumbing the surfaces share, the merchant API (`x402mw.platform.api`), hosted checkout
(`x402mw.platform.checkout`) and the dashboard (`x402mw.platform.dashboard`): the error envelope and
its exception (`errors`), reading request bodies (`bodies`) and the request models they are read
into (`request_models`, which the dashboard's forms fill too), the kinds of value fields take
(`fields`), JSON answers from response models (`responses`), cursor pagination (`pagination`),
routes that carry their OpenAPI operation (`routing`), static files with caching headers (`static`)
and the platform a request is served by (`state`).

Below the surfaces, which are siblings: none imports another. Nothing here but the request models
knows a resource.
"""
