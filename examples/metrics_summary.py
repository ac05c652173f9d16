"""Read a platform's Prometheus metrics and print what they say, for a look without Prometheus.

    x402mw platform serve --metrics-port 9402 &
    python examples/metrics_summary.py http://127.0.0.1:9402/metrics

It prints the settlements by network and outcome (with the reasons of failures), the median and 90th
percentile of each settlement phase (estimated from the histogram buckets, as Prometheus's
``histogram_quantile`` does), and the API routes that answered with server errors.
"""

from __future__ import annotations

import math
import sys
from collections import defaultdict

import httpx
from prometheus_client.parser import text_string_to_metric_families

PHASES = ("before_send", "chain", "platform")


def quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """The ``q`` quantile of a histogram given as sorted (upper bound, cumulative count) pairs."""
    if not buckets or buckets[-1][1] == 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for upper, count in buckets:
        if count >= rank:
            if math.isinf(upper):
                return lower  # past the last finite bucket: its bound is all that is known
            return lower + (upper - lower) * (rank - below) / max(count - below, 1e-12)
        lower, below = upper, count
    return None


def summarize(text: str) -> list[str]:
    """The summary of one scrape (the text format Prometheus reads), as lines."""
    settlements: dict[tuple[str, str, str], float] = {}
    phases: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    server_errors: dict[str, float] = defaultdict(float)
    requests = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "x402mw_settlements_total":
                settlements[(labels["network"], labels["outcome"], labels["reason"])] = sample.value
            elif sample.name.startswith("x402mw_settlement_") and sample.name.endswith("_seconds_bucket"):
                phase = sample.name.removeprefix("x402mw_settlement_").removesuffix("_seconds_bucket")
                phases[(labels["network"], phase)].append((float(labels["le"]), sample.value))
            elif sample.name == "x402mw_http_requests_total":
                requests += sample.value
                if labels["status"].startswith("5"):
                    server_errors[f"{labels['method']} {labels['route']}"] += sample.value
    lines = ["settlements:"]
    for (network, outcome, reason), count in sorted(settlements.items()):
        lines.append(f"  {network} {outcome}{f' ({reason})' if reason else ''}: {count:.0f}")
    if not settlements:
        lines.append("  none yet")
    lines.append("settlement phases (median / 90th percentile):")
    for (network, phase), buckets in sorted(phases.items(), key=lambda item: (item[0][0], PHASES.index(item[0][1]))):
        buckets.sort()
        median, p90 = quantile(0.5, buckets), quantile(0.9, buckets)
        if median is not None and p90 is not None:
            lines.append(f"  {network} {phase}: {median * 1000:.1f} ms / {p90 * 1000:.1f} ms")
    lines.append(f"API requests: {requests:.0f}, answered with a server error: {sum(server_errors.values()):.0f}")
    for route, count in sorted(server_errors.items(), key=lambda item: -item[1]):
        lines.append(f"  {route}: {count:.0f}")
    return lines


def main(url: str) -> int:
    try:
        response = httpx.get(url, timeout=10)
        response.raise_for_status()
    except httpx.HTTPError as exc:
        print(f"cannot read {url}: {exc}", file=sys.stderr)
        return 1
    print("\n".join(summarize(response.text)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:9402/metrics"))
