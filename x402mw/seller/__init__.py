"""The framework-neutral seller core: route configuration, the sans-IO payment gate, its drivers."""

from x402mw.seller.config import AmountCallback, EndpointTerms, PaidRoute
from x402mw.seller.decisions import Answer, Decision, Serve, Settlement
from x402mw.seller.drivers import AsyncSeller, SyncSeller, run_async, run_sync
from x402mw.seller.gate import EXPOSE_HEADERS, PaymentGate, RequestView

__all__ = [
    "EXPOSE_HEADERS",
    "AmountCallback",
    "Answer",
    "AsyncSeller",
    "Decision",
    "EndpointTerms",
    "PaidRoute",
    "PaymentGate",
    "RequestView",
    "Serve",
    "Settlement",
    "SyncSeller",
    "run_async",
    "run_sync",
]
