"""The objects the platform's API answers, as pydantic response models: one class per object, every
JSON answer serialised from one (`x402mw.platform.objects.base` says how), and the OpenAPI
document's response schemas generated from the same classes
(`x402mw.platform.openapi.answers`), so that an answer and its documentation cannot drift.

The models are shapes only: what builds one from the database lives with its resource
(`x402mw.platform.services.payment_intents.payment_intent_of`, the API handlers, checkout).

- `base`: the base model, the kinds of value (money, minor units, timestamps), list pages;
- `payments`: payment intents, refunds, balances, the sandbox's answers;
- `agents`: agent endpoints, challenges, agent payments, usage, settlement, the facilitator;
- `webhooks`: webhook endpoints, events and deliveries;
- `checkout`: the public checkout API;
- `service`: errors, health, readiness and the OpenAPI document.
"""
