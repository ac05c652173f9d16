"""The platform's Prometheus metrics, and the listener that serves them.

::

    x402mw platform serve --metrics-port 9402      # scrape http://127.0.0.1:9402/metrics

The metrics are served on a listener of their own, never on the public API's port: settlement counts
per network are business figures, and a scrape should not need an API key. With ``serve --workers N``
the supervisor serves them, summed over every worker, living or replaced (prometheus_client's
multiprocess mode, in a directory the supervisor makes and removes).

What is measured:

- ``x402mw_http_requests_total{method, route, status}`` and
  ``x402mw_http_request_duration_seconds{method, route}``: every answer, by route template
  (``/v1/agent/endpoints/{endpoint_id}``) so that the label set stays bounded: ``<unmatched>`` for
  paths no route takes, ``other`` for methods HTTP does not define.
- ``x402mw_settlements_total{network, outcome, reason}``: every settle call answered (the agent API
  and the facilitator API), ``outcome`` ``settled``, ``pending`` or ``failed`` with its reason code;
  ``network`` is ``other`` for a network the platform does not serve.
- ``x402mw_verifications_total{network, valid, reason}``: every facilitator verify call answered.
  (Both are counted by the settlement service, `SettlementService.counted`, never by the API.)
- ``x402mw_settlement_before_send_seconds``, ``x402mw_settlement_chain_seconds`` and
  ``x402mw_settlement_platform_seconds`` (each ``{network}``): for each transfer this process sent,
  the time from the settle call to the transfer's sending (verification, the replay claim and the
  simulation), from sending to inclusion (or to the endpoint's confirmations), and the whole
  settlement less the chain's part.
- ``x402mw_relayer_transactions_total{network, result}``: transactions the relayer submitted
  (``sent``) or the node refused (``refused``).
- ``x402mw_relayer_nonce_resyncs_total{network, address}``: times a relayer account found a nonce it used
  taken by another sender and read its nonces from the node again (0 while no two processes share
  an account).
- ``x402mw_relayer_account_balance_wei``, ``x402mw_relayer_account_in_flight`` (each
  ``{network, address}``) and ``x402mw_relayer_account_lease{network, address, holder}``: each
  relayer account's gas, its transactions sent and not yet mined, and which process holds it.
- ``x402mw_rpc_provider_up{network, provider}``: 1 while an RPC provider is in, 0 while it is out.
- ``x402mw_request_log_skipped_total{kind}``: requests of the seller middleware's own upkeep
  (``terms_revalidation``, ``challenge_registration``) kept out of the API request log.
- ``x402mw_webhook_attempts_total{result}`` and ``x402mw_webhook_attempt_duration_seconds``: webhook
  delivery attempts, ``delivered``, ``retrying`` or ``failed`` (given up).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.multiprocess import MultiProcessCollector
from starlette.routing import BaseRoute, Mount, Route, compile_path

_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def _seconds(name: str, documentation: str, labels: Sequence[str] = ()) -> Histogram:
    """A histogram of durations, in the buckets every one of ours shares (1 ms to 60 s)."""
    return Histogram(name, documentation, labels, buckets=_SECONDS)


HTTP_REQUESTS = Counter(
    "x402mw_http_requests",
    "HTTP requests answered, by route template, method and status.",
    ["method", "route", "status"],
)


HTTP_SECONDS = _seconds(
    "x402mw_http_request_duration_seconds",
    "Time from a request's arrival to the end of its answer.",
    ["method", "route"],
)
SETTLEMENTS = Counter(
    "x402mw_settlements",
    "Settle calls answered, by network, outcome (settled, pending, failed) and reason code.",
    ["network", "outcome", "reason"],
)
BEFORE_SEND_SECONDS = _seconds(
    "x402mw_settlement_before_send_seconds",
    "From the settle call to the transfer's sending: verification, the replay claim and the simulation.",
    ["network"],
)
CHAIN_SECONDS = _seconds(
    "x402mw_settlement_chain_seconds",
    "From a transfer's sending to its inclusion (or to the confirmations its endpoint asks for).",
    ["network"],
)
PLATFORM_SECONDS = _seconds(
    "x402mw_settlement_platform_seconds", "A settlement's whole time less the chain's part.", ["network"]
)
VERIFICATIONS = Counter(
    "x402mw_verifications",
    "Facilitator verify calls answered, by network, validity and reason code.",
    ["network", "valid", "reason"],
)
RELAYER_TRANSACTIONS = Counter(
    "x402mw_relayer_transactions",
    "Transactions the relayer submitted (sent) or the node refused.",
    ["network", "result"],
)
RELAYER_NONCE_RESYNCS = Counter(
    "x402mw_relayer_nonce_resyncs",
    "Times a relayer account found its nonces taken by another sender (the node said so) and resynced.",
    ["network", "address"],
)
RELAYER_BALANCE = Gauge(
    "x402mw_relayer_account_balance_wei",
    "Each relayer account's gas balance, as last read, by the process holding its lease.",
    ["network", "address"],
    multiprocess_mode="livemax",
)
RELAYER_IN_FLIGHT = Gauge(
    "x402mw_relayer_account_in_flight",
    "Transactions of each relayer account sent and not yet mined.",
    ["network", "address"],
    multiprocess_mode="livesum",
)
RELAYER_LEASE = Gauge(
    "x402mw_relayer_account_lease",
    "1 for each relayer account this process holds the lease of, labelled with the holder.",
    ["network", "address", "holder"],
    multiprocess_mode="livemax",
)
RPC_PROVIDER_UP = Gauge(
    "x402mw_rpc_provider_up",
    "1 while an RPC provider of a chain is in, 0 while it is out (not answering, or lagging).",
    ["network", "provider"],
    multiprocess_mode="livemin",
)
WEBHOOK_ATTEMPTS = Counter(
    "x402mw_webhook_attempts", "Webhook delivery attempts, by result (delivered, retrying, failed).", ["result"]
)
REQUEST_LOG_SKIPPED = Counter(
    "x402mw_request_log_skipped",
    "Requests of the seller middleware's own upkeep kept out of the API request log, by kind "
    "(terms_revalidation, challenge_registration).",
    ["kind"],
)
WEBHOOK_SECONDS = _seconds("x402mw_webhook_attempt_duration_seconds", "Time of one webhook delivery attempt.")


OTHER_NETWORK = "other"


def count_settlement(network: str, outcome: str, reason: str | None) -> None:
    """One settle call answered with ``outcome`` (``settled``, ``pending`` or ``failed``).

    ``network`` must be one the platform serves, or `OTHER_NETWORK`: a caller's made-up network
    must not become a label value (each would be a new series, without bound)."""
    SETTLEMENTS.labels(network, outcome, "" if outcome == "settled" else reason or "").inc()


def count_verification(network: str, reason: str | None) -> None:
    """One facilitator verify call answered: valid when ``reason`` is None. ``network`` as for
    `count_settlement`."""
    VERIFICATIONS.labels(network, "false" if reason else "true", reason or "").inc()


def time_settlement(network: str, started: float, sent_at: float, included_at: float, finished: float) -> None:
    """The phases of one settlement this process took to the chain (``time.perf_counter`` values)."""
    chain = included_at - sent_at
    BEFORE_SEND_SECONDS.labels(network).observe(sent_at - started)
    CHAIN_SECONDS.labels(network).observe(chain)
    PLATFORM_SECONDS.labels(network).observe(finished - started - chain)


# -- HTTP -------------------------------------------------------------------------------------------

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
UNMATCHED = "<unmatched>"
# Any other method a client sends is counted as "other": a label value per made-up method would let
# anyone grow the metrics without bound.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class _Templates:
    """Which route template a routed request matched, from the endpoint Starlette's router leaves in
    the scope: built once from the app's routes; an endpoint that serves several paths is told apart
    by matching the request's path."""

    def __init__(self, routes: Sequence[BaseRoute]) -> None:
        # Keyed by identity: endpoints live as long as the routes that hold them, and some (routers,
        # apps) are not hashable.
        self._by_endpoint: dict[int, list[tuple[Any, str]]] = {}
        self._add(routes, "")

    def _add(self, routes: Sequence[BaseRoute], prefix: str) -> None:
        for route in routes:
            if isinstance(route, Route):
                self._put(route.endpoint, prefix + route.path)
            elif isinstance(route, Mount):
                if route.routes:
                    self._add(route.routes, prefix + route.path)
                else:
                    self._put(route.app, prefix + route.path + "/{path}")

    def _put(self, endpoint: object, template: str) -> None:
        self._by_endpoint.setdefault(id(endpoint), []).append((compile_path(template)[0], template))

    def of(self, scope: Scope) -> str:
        found = self._by_endpoint.get(id(scope.get("endpoint")))
        if not found:
            return UNMATCHED
        if len(found) == 1:
            return found[0][1]
        path = scope.get("path", "")
        return next((template for regex, template in found if regex.match(path)), found[0][1])


class MetricsMiddleware:
    """Pure ASGI, outermost: counts and times every HTTP answer by method, route template and status.

    A request whose handler raised is counted with the status of the answer sent for it (500 from the
    error middleware inside this one)."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app
        self._templates: _Templates | None = None
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}  # (method, route, status) -> metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_noting_status(message: MutableMapping[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_noting_status)
        finally:
            key = (scope["method"], self._route(scope), status)
            children = self._children.get(key)
            if children is None:
                method = key[0] if key[0] in _METHODS else "other"
                children = (HTTP_REQUESTS.labels(method, key[1], str(status)), HTTP_SECONDS.labels(method, key[1]))
                if method != "other":  # made-up methods share one child but are not kept as keys
                    self._children[key] = children
            children[0].inc()
            children[1].observe(time.perf_counter() - started)

    def _route(self, scope: Scope) -> str:
        if "endpoint" not in scope:
            return UNMATCHED
        if self._templates is None:
            app = scope.get("app")
            self._templates = _Templates(getattr(app, "routes", []))
        return self._templates.of(scope)


# -- serving -----------------------------------------------------------------------------------------


def serve_metrics(port: int, host: str = "127.0.0.1", registry: CollectorRegistry | None = None) -> Callable[[], None]:
    """Serve ``registry`` (this process's metrics by default) at ``http://host:port/metrics`` from a
    daemon thread; returns a function that stops the listener. ``OSError`` if the port is taken."""
    server, thread = start_http_server(port, addr=host, registry=registry or REGISTRY)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return stop


class MultiprocessMetrics:
    """The metrics of several worker processes, summed (prometheus_client's multiprocess mode).

    Made by the supervisor before it starts the workers: it points ``PROMETHEUS_MULTIPROC_DIR`` at a
    new directory, which processes started afterwards (the workers) inherit and write their metrics
    to; `registry` reads them all. `close` removes the directory."""

    def __init__(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="x402mw-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = self.directory
        self.registry = CollectorRegistry()
        MultiProcessCollector(self.registry, path=self.directory)  # type: ignore[no-untyped-call]

    def close(self) -> None:
        os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
        shutil.rmtree(self.directory, ignore_errors=True)
