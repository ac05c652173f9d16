"""The framework-neutral seller core: route configuration (with its discovery, sign-in and paywall
settings), the sans-IO payment gate, its drivers."""

from x402mw.seller.answers import EXPOSE_HEADERS, internal_error_answer
from x402mw.seller.config import EndpointTerms, PaidRoute
from x402mw.seller.decisions import AmountCallback, Answer, Decision, Held, Serve, Settlement
from x402mw.seller.discovery import Discovery, discovery_from_openapi
from x402mw.seller.drivers import AsyncSeller, SyncSeller, run_async, run_sync
from x402mw.seller.gate import DEFAULT_PLATFORM_URL, PaymentGate, RequestView
from x402mw.seller.metering import MeteredPayment, ServeMetered, UsageError
from x402mw.seller.paywall import Paywall
from x402mw.seller.routes import RouteTable
from x402mw.seller.setup import build_gate
from x402mw.seller.sign_in import SignIn

__all__ = [
    "DEFAULT_PLATFORM_URL",
    "EXPOSE_HEADERS",
    "AmountCallback",
    "Answer",
    "AsyncSeller",
    "Decision",
    "Discovery",
    "EndpointTerms",
    "Held",
    "MeteredPayment",
    "PaidRoute",
    "PaymentGate",
    "Paywall",
    "RequestView",
    "RouteTable",
    "Serve",
    "ServeMetered",
    "Settlement",
    "SignIn",
    "SyncSeller",
    "UsageError",
    "build_gate",
    "discovery_from_openapi",
    "internal_error_answer",
    "run_async",
    "run_sync",
]
