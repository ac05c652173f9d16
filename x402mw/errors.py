"""The one exception tree of x402mw.

::

    X402Error
     ├── ConfigurationError        a route, price or setting is wrong (raised at start-up, all problems at once)
     ├── PriceError                a price cannot be expressed in the token (too precise, negative, unknown coin)
     ├── PaymentError              a payment cannot be accepted (carries a reason code)
     │    └── InvalidPaymentError       the payment header or its authorization is malformed or does not match
     ├── PlatformError             the platform answered with an error envelope or could not be reached
     └── PaymentRefusedError       the paying client would not pay (over a cap, network not allowed, ...)

A payment the platform refuses or fails to settle raises nothing in a seller's code: the payment
gate answers the payer itself (402 with the reason code, or the payment pending), a route's handler
runs only once its payment is settled, a metered request's `MeteredPayment.settlement` stays None,
and a paid MCP tool's result is withheld. (There was a ``SettlementError`` for it, never raised.)

Every error carries what an operator needs: ``reason`` (an opaque reason code), and where known the
``request_id``, ``payer`` and ``transaction``. Secrets never appear in messages.

The clients' and helpers' errors (``x402mw.client``, ``x402mw.seller``, ``x402mw.protocol``, ``x402mw.evm``),
each raised to the code that called them::

    PlatformError
     └── APIError (client/merchant/errors.py)   the merchant API client, for an answer that is not 2xx
          │                                     (`error_from_response`), by status, after the client's retries:
          ├── InvalidRequestError                400 (or type invalid_request_error)
          ├── AuthenticationError                401
          ├── NotFoundError                      404
          ├── ConflictError                      409
          ├── IdempotencyError                   type idempotency_error (400 key reused, 409 key in use)
          ├── UnprocessableEntityError           422
          ├── RateLimitError                     429
          ├── ServerError                        5xx
          └── APIConnectionError                 no answer at all (status 0)
    X402Error
     ├── WebhookVerificationError (client/webhooks.py)  a delivery that is not authentic, too old or not an
     │                                                  event; the merchant's receiver answers it with 400
     └── UsageError (seller/metering.py)                a metered usage that cannot be charged, raised to the
                                                        seller's handler that reported it (also a ValueError)
    ValueError
     ├── JsonLimitError (protocol/bounded_json.py)    JSON too large or too deep: the platform's body reader
     │                                                answers 413 body_too_large or 400 json_too_deep, the
     │                                                payment header's codec raises InvalidPaymentError
     │                                                (invalid_payload), webhook verification
     │                                                WebhookVerificationError
     └── InvalidSignatureError (evm/eip712.py)        a malformed signature: settlement takes it for a smart
                                                      account's (asked on-chain) or refuses the payment
                                                      (PaymentRefusal, an invalid-signature reason)

Inside the platform (``x402mw.platform``; paths below it), exceptions that never reach a client as
themselves: each is caught where it is meant to be and answered in the error envelope
(``{"error": {type, code, message, requestId, param}}``, `x402mw.platform.http.errors`), as a
settlement outcome, or by the worker that retries::

    ServiceError (services/errors.py)        a request a service's rules refuse, with status, code and param:
     │                                       answered by `exception_handlers` (http/errors.py) in the envelope
     │                                       with its status and code (type invalid_request_error, or
     │                                       api_error for a 5xx); some endpoints make it an HttpError first
     ├── PaymentIntentError                  payment_intents, payment_links, checkout/attempts: 400
     │                                       unsupported_chain, 409 order_id_conflict,
     │                                       payment_intent_unexpected_state, payment_link_inactive, ...
     ├── RefundError                         refunds: 404 resource_missing, 409 payment_intent_already_refunded,
     │                                       422 insufficient_balance, 503 chain_unavailable
     ├── PlanError                           subscriptions/plans: 409 slug_taken
     ├── SubscriptionError                   subscriptions/service: 404 resource_missing, 409
     │                                       subscription_conflict, subscription_not_cancelable, plan_inactive
     └── TestClockError                      subscriptions/clocks: 409 test_clock_backwards
    HttpError (http/errors.py)               raised by the API's and the checkout's handlers, body readers and
                                             the idempotency middleware: answered by `exception_handlers` as
                                             raised, its type given or by status (401 authentication_error,
                                             429 rate_limit_error, 5xx api_error, else invalid_request_error)
    PaymentRefusal (services/settlement/checks.py)  a payment that fails a check, with its x402 reason code:
                                             settlement makes it a failed outcome (``errorReason``: agents'
                                             settle and the facilitator's settle answer ``success: false``,
                                             the facilitator's verify ``isValid: false``); the checkout
                                             makes it a RelayRefused
    RelayRefused (checkout/relay.py)         a checkout authorization refused, nothing sent: its reason mapped
                                             to 409 (authorization_expired, authorization_used, ...) or 422
                                             (insufficient_funds, authorization_failed); checkout/authorizations
                                             answers it as an HttpError, checkout/agent_pay with a new 402
    IdentifierConflict (services/settlement/payment_identifiers.py)  a payment-identifier used with another
                                             payment: agents' settle and the facilitator's settle answer 409
                                             payment_identifier_conflict
    KeyTaken (services/idempotency.py)       an Idempotency-Key found used by an endpoint that took it over
                                             (PaymentIntentWriter.create, the middleware's store): the
                                             idempotency middleware answers as the key's first use decides
    InsufficientBalance (services/ledger.py)  a ledger entry the balance cannot cover, nothing written:
                                             RefundService answers RefundError 422 insufficient_balance; the
                                             deposit watcher (a reorg's take-back) and the subscriptions'
                                             refund of an unowed payment log it
    ChainUnavailable (chain/relayer.py)      the node cannot be reached, nothing sent (RelayerBusy: every
     └── RelayerBusy                         account at its limit; the pool tries another): settlement answers
                                             an unavailable outcome, 503 chain_unavailable; recovery and the
                                             worker try again; elsewhere in a request the RequestIdMiddleware
                                             answers 503 chain_unavailable with Retry-After
    TransactionDropped (chain/healing.py, exported by chain/relayer.py)  a transaction the relayer's healing
                                             gave up (its call expired), raised to whoever waits for its
                                             receipt: settlement asks the chain what became of the payment
                                             (recovery); refunds and sweeps log it and retry next round
    RevertError (chain/transactions.py)      a call or transaction reverted: settlement refuses the payment
                                             (PaymentRefusal with the revert's reason) or fails it; a refund
                                             is marked failed; a sweep waits for the other one under way
    RpcError (chain/rpc.py)                  a JSON-RPC error object from the node: the relayer and its healing
                                             read nonce, fee and pool answers; a refused transaction reaches
                                             settlement as a failed outcome (unexpected_settle_error); a
                                             simulation's revert becomes a RevertError
    SettingsError (settings/problems.py)     a ConfigurationError listing every problem with the settings:
                                             the CLI answers a usage error (exit status 2)
    AccountError (services/dashboard_users.py)     a refused account operation: the dashboard shows it on its page
                                             (400; 404 for an unknown invitation), audited; the CLI exits 1
    PageError (dashboard/web.py)             a refused dashboard request (403 for a stale form or a role, 404
                                             for nothing there): the `page` decorator answers an error page with
                                             its status and writes its action to the audit log
    UnbuildableEmail (emails/messages.py)    an email that cannot be built on any attempt: the email outbox
                                             marks it failed at once, logged, never retried

Anything else a request raises is answered by `x402mw.platform.http.errors.RequestIdMiddleware`: 503
(``chain_unavailable``, ``database_unavailable``, ``service_unavailable``, with ``Retry-After``) when a
dependency is down (`outage_error`), else a logged 500 ``internal_error`` quoting the request id.
"""

from __future__ import annotations

__all__ = [
    "ConfigurationError",
    "InvalidPaymentError",
    "PaymentError",
    "PaymentRefusedError",
    "PlatformError",
    "PriceError",
    "X402Error",
]


class X402Error(Exception):
    """Root of every error raised by x402mw."""

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        request_id: str | None = None,
        payer: str | None = None,
        transaction: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.request_id = request_id
        self.payer = payer
        self.transaction = transaction


class ConfigurationError(X402Error):
    """Configuration is wrong. ``problems`` lists every problem found, not just the first."""

    def __init__(self, problems: list[str] | str) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("; ".join(self.problems), reason="configuration_error")


class PriceError(X402Error, ValueError):
    """A price cannot be expressed exactly in the token's minor units."""


class PaymentError(X402Error):
    """A payment cannot be accepted."""


class InvalidPaymentError(PaymentError):
    """The payment header or its authorization is malformed or does not match the offer."""


class PlatformError(X402Error):
    """The platform answered with an error, or could not be reached.

    ``status`` is the HTTP status (0 when the platform could not be reached) and ``code`` the
    error code of the platform's error envelope.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int = 0,
        code: str | None = None,
        error_type: str | None = None,
        param: str | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(message, reason=code, request_id=request_id)
        self.status = status
        self.code = code
        self.error_type = error_type
        self.param = param


class PaymentRefusedError(X402Error):
    """The paying client refused to pay (over its cap, network or asset not allowed, bad receipt)."""
