"""The framework-neutral seller core: route configuration, the sans-IO payment gate, its drivers."""

from x402mw.seller.config import AmountCallback, EndpointTerms, PaidRoute
from x402mw.seller.decisions import Answer, Decision, Held, Serve, Settlement
from x402mw.seller.drivers import AsyncSeller, SyncSeller, run_async, run_sync
from x402mw.seller.gate import DEFAULT_PLATFORM_URL, EXPOSE_HEADERS, PaymentGate, RequestView, internal_error_answer
from x402mw.seller.routes import RouteTable
from x402mw.seller.setup import build_gate

__all__ = [
    "DEFAULT_PLATFORM_URL",
    "EXPOSE_HEADERS",
    "AmountCallback",
    "Answer",
    "AsyncSeller",
    "Decision",
    "EndpointTerms",
    "Held",
    "PaidRoute",
    "PaymentGate",
    "RequestView",
    "RouteTable",
    "Serve",
    "Settlement",
    "SyncSeller",
    "build_gate",
    "internal_error_answer",
    "run_async",
    "run_sync",
]
