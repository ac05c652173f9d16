"""Schemathesis hooks for `tests.integration.test_schemathesis`, loaded by the ``schemathesis`` command
through ``SCHEMATHESIS_HOOKS``. Each one keeps the generated requests to what a client can mean by
them where the OpenAPI document states a rule no JSON Schema keyword can say; none touches a check.

- An ``Idempotency-Key`` promises "the same request as before under this key": the generator
  reuses keys across unrelated requests (which the platform rightly refuses with 400
  ``idempotency_error``), so every request gets a key of its own, still one the document allows.
- A payment intent's ``expiresAt`` must lie in the future (400 otherwise, tested in
  ``test_payment_intents``): timestamps are kept to the future.
- An order, payment link or plan must be in coins a chain of the platform carries (400
  ``currency_unavailable`` otherwise, tested in ``test_payment_intents``): the suite's dev chain has
  no USDT, so a body naming it names USDC instead (in every phase: the coverage phase applies no
  body filter).
- A payment's terms decide the shape of its payload: ``upto`` terms take a Permit2 payload, ``exact``
  ones an EIP-3009 payload that echoes them (``accepted``, required from x402 v2 on). The document
  gives both payload shapes, but no JSON Schema keyword ties one field's value to another's shape
  the generator follows: a settlement or facilitator body keeps to the ``exact`` pair.
- A report's filters are a date or an instant (``from`` before ``to``, at most three years apart),
  an IANA time zone, a coin's symbol and an endpoint's id (400 otherwise, tested in
  ``test_reports``): a generated value of one of these is replaced by one a client can mean.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import schemathesis

_serial = itertools.count()


@schemathesis.hook
def before_call(context: schemathesis.HookContext, case: schemathesis.Case, kwargs: dict[str, Any]) -> None:
    headers = case.headers or {}
    for name in list(headers):
        if name.lower() == "idempotency-key" and isinstance(headers[name], str):
            # the document's pattern: printable ASCII, no space at either end, at most 255
            headers[name] = (f"{next(_serial):08d}-" + headers[name])[:255].rstrip()
    if case.method == "POST" and case.path in _PRICED and isinstance(case.body, dict):
        _carried_coins(case.body)
    if case.method == "POST" and case.path in _PAYING and isinstance(case.body, dict):
        _exact_pair(case.body)
    if case.method == "GET" and case.path == "/v1/reports/{name}" and isinstance(case.query, dict):
        _meant_report_filters(case.query)


# what each of a report's free-text filters becomes: None leaves it out (its default)
_REPORT_FILTERS: dict[str, str | None] = {
    "from": "2026-01-01",
    "to": "2026-02-01",
    "timeZone": "Europe/Paris",
    "currency": "USDC",
    "endpoint": None,
}


def _meant_report_filters(query: dict[str, Any]) -> None:
    for name, meant in _REPORT_FILTERS.items():
        if name in query:
            if meant is None:
                del query[name]
            else:
                query[name] = meant


_PRICED = ("/v1/payment-intents", "/v1/payment-links", "/v1/subscription-plans")
_PAYING = ("/v1/agent/settlements", "/v1/x402/settle", "/v1/x402/verify")


def _exact_pair(body: dict[str, Any]) -> None:
    terms = body.get("accepted", body.get("paymentRequirements"))
    if isinstance(terms, dict) and terms.get("scheme") == "upto":
        terms["scheme"] = "exact"
    payload = body.get("paymentPayload")
    if isinstance(payload, dict) and "accepted" not in payload and isinstance(terms, dict):
        payload["accepted"] = terms


_UNCARRIED, _CARRIED = "USDT", "USDC"  # the suite's chains carry no USDT


def _carried_coins(body: dict[str, Any]) -> None:
    if body.get("currency") == _UNCARRIED:
        body["currency"] = _CARRIED
    accepted = body.get("acceptedCurrencies")
    if isinstance(accepted, list) and _UNCARRIED in accepted:
        body["acceptedCurrencies"] = list(dict.fromkeys(_CARRIED if c == _UNCARRIED else c for c in accepted))


@schemathesis.hook("filter_body").apply_to(method="POST", path="/v1/payment-intents")
def future_expiry(context: schemathesis.HookContext, body: Any) -> bool:
    if not isinstance(body, dict) or not isinstance(body.get("expiresAt"), str):
        return True
    try:
        when = datetime.fromisoformat(body["expiresAt"].upper())
    except ValueError:
        return True  # not a timestamp: the platform refuses it, as the document says
    if when.tzinfo is None:
        return True
    try:
        return when.astimezone(UTC) > datetime.now(UTC) + timedelta(minutes=5)
    except OverflowError:
        return when.year > 1
