"""Traces with OpenTelemetry: off by default, and free when off.

A paid request is followed by one W3C ``traceparent`` from the agent's client (`X402Auth`,
``x402mw pay``) through the seller (every adapter, the gateway) to the platform's API, its
settlement, and the relayer's send and receipt; the worker's jobs have spans of their own.

Tracing is on when the standard variables ask for it and the ``otel`` extra is installed
(``pip install 'x402mw[otel]'``):

- ``OTEL_TRACES_EXPORTER`` names an exporter (``otlp``, ``console``; ``none`` turns it off), or
  ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` names a collector;
- ``OTEL_SDK_DISABLED=true`` turns it off whatever else is set.

The rest is OpenTelemetry's own: ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``,
``OTEL_TRACES_SAMPLER``, ``OTEL_BSP_*``, ``OTEL_EXPORTER_OTLP_HEADERS`` and ``..._TIMEOUT``. The
OTLP exporter speaks HTTP/protobuf. An application that sets up its own tracer provider calls
`enable` instead; the spans then go wherever it sends its own.

When it is off, the code on a request's path checks `enabled` (a module attribute) and does
nothing else. A collector that cannot be reached loses the spans, never a request: the exporter
says so in the log once.

Spans carry ids (payment, challenge, endpoint), the scheme, network, amount in atomic units and
the transaction hash: `Span.set` takes only the names in ``ATTRIBUTES``, so no signature, key,
API key or email can reach one by mistake.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal, cast

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
    from opentelemetry.trace import Span as OtelSpan
    from opentelemetry.trace import TracerProvider

logger = logging.getLogger("x402mw.tracing")

Kind = Literal["internal", "server", "client", "consumer"]
Value = str | int | bool

ATTRIBUTES: dict[str, str] = {
    "payment_id": "x402.payment.id",
    "challenge_id": "x402.challenge.id",
    "endpoint_id": "x402.endpoint.id",
    "scheme": "x402.scheme",
    "network": "x402.network",
    "amount": "x402.amount",
    "asset": "x402.asset",
    "pay_to": "x402.pay_to",
    "payer": "x402.payer",
    "outcome": "x402.outcome",
    "reason": "x402.reason",
    "transaction": "x402.transaction.hash",
    "block": "x402.block.number",
    "sender": "x402.relayer.address",
    "nonce": "x402.relayer.nonce",
    "job": "x402.job",
    "method": "http.request.method",
    "route": "http.route",
    "path": "url.path",
    "host": "server.address",
    "status_code": "http.response.status_code",
}
"""What a span may carry: `Span.set`'s keyword on the left, the attribute's name on the right."""

_TRUE = ("true", "1", "yes", "on")


def wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the ``OTEL_*`` variables of ``environ`` ask for traces (see the module's docstring)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() in _TRUE:
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def _installed() -> bool:
    try:
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError:
        return False
    return True


enabled: bool = False
"""Whether spans are made. Code on a request's path checks this before anything else."""
if wanted():
    enabled = _installed()
    if not enabled:
        logger.warning(
            "OTEL_* variables ask for traces, but OpenTelemetry is not installed: pip install 'x402mw[otel]'"
        )

_lock = threading.Lock()
_provider: TracerProvider | None = None


def enable(provider: TracerProvider | None = None) -> None:
    """Make spans from now on, through ``provider`` (default: the global tracer provider the
    application set up, or else one built from the ``OTEL_*`` variables)."""
    global enabled, _provider
    with _lock:
        _provider = provider
        enabled = True


def disable() -> None:
    """Make no more spans (what is already recorded is still exported); a later `enable` without a
    provider takes the global one again."""
    global enabled, _provider
    with _lock:
        enabled = False
        _provider = None


def _tracer_provider() -> TracerProvider:
    global _provider
    provider = _provider
    if provider is not None:
        return provider
    with _lock:
        if _provider is None:
            _provider = _global_or_configured()
        return _provider


def _global_or_configured() -> TracerProvider:
    from opentelemetry import trace

    current = trace.get_tracer_provider()
    if not isinstance(current, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return current  # the application set one up
    provider = configured()
    trace.set_tracer_provider(provider)
    return provider


def configured(environ: Mapping[str, str] = os.environ, service: str | None = None) -> TracerProvider:
    """A tracer provider built from the ``OTEL_*`` variables: a batch processor per exporter that
    ``OTEL_TRACES_EXPORTER`` names (``otlp`` by default, over HTTP/protobuf; ``console``)."""
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service or _service_name()}))
    provider = TracerProvider(resource=resource)
    names = [name.strip().lower() for name in environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",")]
    for name in names:
        if name == "otlp":
            provider.add_span_processor(BatchSpanProcessor(_otlp_exporter(environ)))
        elif name == "console":
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
        elif name and name != "none":
            logger.warning("OTEL_TRACES_EXPORTER names %r, which x402mw does not export to (otlp, console)", name)
    return provider


def _service_name() -> str:
    import sys

    argv = sys.argv[1:3]
    if argv[:1] == ["platform"]:
        return "x402mw-platform"
    if argv[:1] in (["pay"], ["gateway"]):
        return f"x402mw-{argv[0]}"
    return "x402mw"


def _otlp_exporter(environ: Mapping[str, str]) -> SpanExporter:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    if protocol and protocol != "http/protobuf":
        logger.warning("OTEL_EXPORTER_OTLP_PROTOCOL is %r; x402mw exports traces over http/protobuf", protocol)
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or (
        environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318").rstrip("/") + "/v1/traces"
    )
    # The exporter logs every failed batch (and every retry): ours says it once.
    logging.getLogger("opentelemetry.exporter.otlp.proto.http.trace_exporter").addFilter(lambda record: False)
    try:
        exporter = OTLPSpanExporter(endpoint=endpoint)
    except Exception as exc:  # a malformed endpoint: spans go nowhere, requests go on
        logger.warning("traces cannot be exported to %r (OTEL_EXPORTER_OTLP_ENDPOINT): %s", endpoint, exc)
        return cast("SpanExporter", _Nowhere())
    return cast("SpanExporter", _ToldOnce(exporter, endpoint))


def _result() -> type[SpanExportResult]:
    from opentelemetry.sdk.trace.export import SpanExportResult

    return SpanExportResult


class _ToldOnce:
    """An exporter whose first failure is logged (with where it was sending), and no other."""

    def __init__(self, inner: SpanExporter, endpoint: str) -> None:
        self._inner = inner
        self._endpoint = endpoint
        self._told = False

    def export(self, spans: Any) -> SpanExportResult:
        result = _result()
        try:
            outcome = self._inner.export(spans)
        except Exception:
            outcome = result.FAILURE
        if outcome is result.FAILURE and not self._told:
            self._told = True
            logger.warning(
                "traces could not be exported to %s (OTEL_EXPORTER_OTLP_ENDPOINT): spans are lost until a "
                "collector answers there; requests are not affected. Said once.",
                self._endpoint,
            )
        return outcome

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class _Nowhere:
    def export(self, spans: Any) -> SpanExportResult:
        return _result().SUCCESS

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


# -- spans ----------------------------------------------------------------------------------------


class Span:
    """One span of ours: attributes by `ATTRIBUTES`' names only."""

    __slots__ = ("_span",)

    def __init__(self, span: OtelSpan) -> None:
        self._span = span

    def set(self, **attributes: Value | None) -> None:
        """Set attributes by their keywords in `ATTRIBUTES` (a None is left out); a keyword not
        there is a ``KeyError``."""
        for key, value in attributes.items():
            name = ATTRIBUTES[key]
            if value is not None:
                self._span.set_attribute(name, value)

    def failed(self, exc: BaseException | str) -> None:
        """Mark the span an error: ``exc``'s type name (its message may hold what a span must not),
        or a reason code."""
        from opentelemetry.trace import Status, StatusCode

        described = exc if isinstance(exc, str) else type(exc).__name__
        self._span.set_status(Status(StatusCode.ERROR, described))

    def rename(self, name: str) -> None:
        self._span.update_name(name)

    @property
    def traceparent(self) -> str:
        """This span's context as a W3C ``traceparent`` header's value."""
        context = self._span.get_span_context()
        return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"

    def end(self) -> None:
        self._span.end()


class _Quiet(Span):
    """What `span` gives while tracing is off: every call does nothing."""

    __slots__ = ()

    def __init__(self) -> None:
        pass

    def set(self, **attributes: Value | None) -> None:
        return None

    def failed(self, exc: BaseException | str) -> None:
        return None

    def rename(self, name: str) -> None:
        return None

    @property
    def traceparent(self) -> str:
        return ""

    def end(self) -> None:
        return None


QUIET = _Quiet()
"""A span that records nothing."""


class _Off:
    def __enter__(self) -> Span:
        return QUIET

    def __exit__(self, *exc_info: object) -> None:
        return None


OFF = _Off()
"""The context manager to use in place of `span` when tracing is off: it yields `QUIET`."""


def _kind(kind: Kind) -> Any:
    from opentelemetry.trace import SpanKind

    return {
        "internal": SpanKind.INTERNAL,
        "server": SpanKind.SERVER,
        "client": SpanKind.CLIENT,
        "consumer": SpanKind.CONSUMER,
    }[kind]


def _parent_context(traceparent: str | None) -> Any:
    if not traceparent:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    context = TraceContextTextMapPropagator().extract({"traceparent": traceparent})
    from opentelemetry import trace

    return context if trace.get_current_span(context).get_span_context().is_valid else None


def start(name: str, *, kind: Kind = "internal", parent: str | None = None, **attributes: Value | None) -> Span:
    """Start a span that is not made the current one (for a generator that yields between its
    start and end): its parent is ``parent`` (a ``traceparent`` value) if valid, else the current
    span. End it with `Span.end`."""
    tracer = _tracer_provider().get_tracer("x402mw")
    context = _parent_context(parent)
    span = Span(tracer.start_span(name, context=context, kind=_kind(kind)))
    span.set(**attributes)
    return span


@contextlib.contextmanager
def span(
    name: str, *, kind: Kind = "internal", parent: str | None = None, **attributes: Value | None
) -> Iterator[Span]:
    """A span made the current one for the block (its children, and tasks started in it, are its
    children); an exception leaving the block marks it failed. Only while `enabled`: the caller
    writes ``with tracing.span(...) if tracing.enabled else tracing.OFF as span:``."""
    from opentelemetry import context as otel_context
    from opentelemetry import trace

    started = start(name, kind=kind, parent=parent, **attributes)
    token = otel_context.attach(trace.set_span_in_context(started._span))
    try:
        yield started
    except BaseException as exc:
        started.failed(exc)
        raise
    finally:
        otel_context.detach(token)
        started.end()


def current_traceparent() -> str | None:
    """The current span's context as a ``traceparent`` value (None when there is none)."""
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
