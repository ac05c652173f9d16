"""Keeping the report rollups (``report_rollups``) up to date, in the transaction of each write that
changes a figure, from two places every such write passes through:

- `apply_events`, called by the transactional outbox (`x402mw.platform.services.outbox`) with the
  events it writes: ``agent_payment.settled``, ``payment_intent.succeeded``, ``refund.completed``,
  ``refund.failed``, ``payment_intent.expired`` and ``subscription.created|canceled|expired``;
- `apply_challenges`, called by `x402mw.platform.services.challenges.record_challenges` (and by
  the settlement's writes, which record a challenge not registered yet) with the challenges recorded
  for the first time;
- `apply_agent_failures`, called by the settlement's writes with the agent payments they mark
  failed for the first time (counted on the hour the payment was made, by its x402 reason).

Each figure is added to the hour of the instant it belongs to, read from the object itself, not
from when the write happens: a payment's gross to the hour it was paid, a refund to the hour it
completed (so a refund on a later day lowers that day's net, not the payment's), a challenge paid
late to the hour the challenge was issued (its conversion), a subscription's churn to when it ended.
So a payment that settles on a later day than it was made counts on the day it settled, and nothing
has to be moved afterwards. Deltas are summed per row first and written in key order (no deadlock
between two writers).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from sqlalchemy import Connection, select
from sqlalchemy.dialects import postgresql, sqlite

from x402mw.platform.db import tables

DECIMALS = 6

GROSS = "gross"
REFUNDED = "refunded"
CHALLENGED = "challenged"
CHALLENGE_PAID = "challenge_paid"
FAILED = "failed"
PAYER = "payer"
SUBSCRIBED = "subscribed"
CHURNED = "churned"
LATENCY = "latency"
DAY = ":d"
"""The suffix of a metric's day rows: each figure is summed per UTC hour and, again, per UTC day
(``hour`` is then the day's start), so that a long range reads a row per day."""

LATENCY_BOUNDS_MS: tuple[int, ...] = (
    50, 100, 200, 300, 500, 750, 1000, 1500, 2000, 3000, 5000, 7500, 10000, 15000, 30000, 60000, 120000, 300000
)  # fmt: skip
"""Upper bounds (ms) of the settlement-latency histogram's buckets; the last bucket is open."""

_MONTHLY = {"weekly": (52, 12), "monthly": (1, 1), "quarterly": (1, 3), "yearly": (1, 12)}

Key = tuple[str, bool, str, datetime, str, str]


def hour_of(at: datetime) -> datetime:
    """The start of the UTC hour holding ``at``."""
    return at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def monthly_minor(amount_minor: int, interval: str) -> int:
    """A plan's price per month (its MRR), in minor units rounded down."""
    times, per = _MONTHLY.get(interval, (1, 1))
    return amount_minor * times // per


def latency_bucket(milliseconds: int) -> str:
    """The histogram bucket of a settlement latency: its upper bound in ms, zero-padded to sort ("" +
    "inf" for the open one)."""
    for bound in LATENCY_BOUNDS_MS:
        if milliseconds <= bound:
            return f"{bound:07d}"
    return "inf"


def _instant(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _minor(value: Any) -> int:
    """A decimal string of the API (``"25.00"``) in minor units; 0 for anything else."""
    if not isinstance(value, str):
        return 0
    try:
        return int(Decimal(value).scaleb(DECIMALS))
    except (InvalidOperation, ValueError):
        return 0


class _Deltas:
    def __init__(self) -> None:
        self.rows: dict[Key, list[int]] = defaultdict(lambda: [0, 0])

    def add(
        self, merchant: str, livemode: bool, metric: str, at: datetime, currency: str, dimension: str, amount: int
    ) -> None:
        hour = hour_of(at)
        for key in (
            (merchant, livemode, metric, hour, currency, dimension[:64]),
            (merchant, livemode, metric + DAY, hour.replace(hour=0), currency, dimension[:64]),
        ):
            row = self.rows[key]
            row[0] += amount
            row[1] += 1

    def write(self, conn: Connection) -> None:
        if not self.rows:
            return
        table = tables.report_rollups
        dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
        insert = dialect.insert(table)
        statement = insert.on_conflict_do_update(
            index_elements=[
                table.c.merchant_id,
                table.c.livemode,
                table.c.metric,
                table.c.hour,
                table.c.currency,
                table.c.dimension,
            ],
            set_={
                "amount_minor": table.c.amount_minor + insert.excluded.amount_minor,
                "count": table.c.count + insert.excluded.count,
            },
        )
        rows = []
        for key in sorted(self.rows):  # in key order: two writers lock the rows they share in one order
            amount, count = self.rows[key]
            merchant, livemode, metric, hour, currency, dimension = key
            rows.append(
                {
                    "merchant_id": merchant,
                    "livemode": livemode,
                    "metric": metric,
                    "hour": hour,
                    "currency": currency,
                    "dimension": dimension,
                    "amount_minor": amount,
                    "count": count,
                }
            )
        conn.execute(statement, rows)  # one round trip: the keys are distinct, summed above


def _order_dimension(conn: Connection, payment_intent_id: str) -> str:
    """The plan an order pays an invoice of, or "" for an order of its own."""
    invoices, subs = tables.subscription_invoices, tables.subscriptions
    plan = conn.execute(
        select(subs.c.plan_id)
        .select_from(invoices.join(subs, subs.c.id == invoices.c.subscription_id))
        .where(invoices.c.payment_intent_id == payment_intent_id)
    ).scalar()
    return str(plan) if plan else ""


def _agent_payment(
    deltas: _Deltas, merchant: str, livemode: bool, data: Mapping[str, Any], issued_at: Mapping[str, datetime]
) -> None:
    settled_at = _instant(data.get("settledAt"))
    if settled_at is None:
        return
    amount = int(data.get("amountMinor") or 0)
    currency = str(data.get("currency") or "")
    endpoint = str(data.get("endpointId") or "")
    deltas.add(merchant, livemode, GROSS, settled_at, currency, endpoint, amount)
    if data.get("payer"):
        deltas.add(merchant, livemode, PAYER, settled_at, currency, str(data["payer"]).lower(), amount)
    created_at = _instant(data.get("createdAt"))
    if created_at is not None:
        millis = max(0, int((settled_at - created_at).total_seconds() * 1000))
        deltas.add(merchant, livemode, LATENCY, settled_at, currency, latency_bucket(millis), 0)
    issued = issued_at.get(str(data.get("challengeId") or ""))
    if issued is not None:
        deltas.add(merchant, livemode, CHALLENGE_PAID, issued, currency, endpoint, amount)


def _order_paid(conn: Connection, deltas: _Deltas, merchant: str, livemode: bool, data: Mapping[str, Any]) -> None:
    paid_at = _instant(data.get("paidAt"))
    if paid_at is None:
        return
    amount = _minor(data.get("amountReceived"))
    currency = str(data.get("paidCurrency") or data.get("currency") or "")
    deltas.add(merchant, livemode, GROSS, paid_at, currency, _order_dimension(conn, str(data.get("id"))), amount)
    if data.get("payer"):
        deltas.add(merchant, livemode, PAYER, paid_at, currency, str(data["payer"]).lower(), amount)


def _refund(
    conn: Connection, deltas: _Deltas, merchant: str, livemode: bool, data: Mapping[str, Any], at: datetime, kind: str
) -> None:
    currency = str(data.get("currency") or "")
    if kind == "completed":
        done = _instant(data.get("completedAt")) or at
        dimension = _order_dimension(conn, str(data.get("paymentId")))
        deltas.add(merchant, livemode, REFUNDED, done, currency, dimension, _minor(data.get("amount")))
    else:
        deltas.add(merchant, livemode, FAILED, at, currency, "refund_failed", _minor(data.get("amount")))


def _subscription(
    conn: Connection, deltas: _Deltas, merchant: str, livemode: bool, data: Mapping[str, Any], at: datetime, kind: str
) -> None:
    sub = data.get("subscription") or {}
    plans = tables.subscription_plans
    plan = conn.execute(
        select(plans.c.amount_minor, plans.c.currency, plans.c.interval).where(plans.c.id == str(sub.get("planId")))
    ).first()
    if plan is None:
        return
    mrr = monthly_minor(int(plan.amount_minor), str(plan.interval))
    plan_id = str(sub.get("planId"))
    if kind == "created":
        invoice = data.get("invoice") or {}
        started = _instant(invoice.get("paidAt")) or _instant(sub.get("currentPeriodStart")) or at
        deltas.add(merchant, livemode, SUBSCRIBED, started, str(plan.currency), plan_id, mrr)
    elif sub.get("status") in ("canceled", "expired") and int(sub.get("periodsPaid") or 0) > 0:
        ended = _instant(sub.get("endedAt")) or at
        deltas.add(merchant, livemode, CHURNED, ended, str(plan.currency), plan_id, mrr)


def apply_events(conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
    """Add what the events ``rows`` (``events`` rows, written in ``conn``'s transaction) change to
    the rollups, in that transaction."""
    deltas = _Deltas()
    answered = sorted(
        {
            str(challenge)
            for row in rows
            if row["type"] == "agent_payment.settled"
            and (challenge := (row["data"].get("agentPayment") or {}).get("challengeId"))
        }
    )
    issued_at: dict[str, datetime] = {}
    if answered:  # when each answered challenge was issued, in one read
        challenges = tables.agent_challenges
        query = select(challenges.c.id, challenges.c.created_at).where(challenges.c.id.in_(answered))
        issued_at = {str(ident): created for ident, created in conn.execute(query)}
    for row in rows:
        kind, merchant, livemode, data = str(row["type"]), str(row["merchant_id"]), bool(row["livemode"]), row["data"]
        at: datetime = row["created_at"]
        if kind == "agent_payment.settled":
            _agent_payment(deltas, merchant, livemode, data.get("agentPayment") or {}, issued_at)
        elif kind == "payment_intent.succeeded":
            _order_paid(conn, deltas, merchant, livemode, data.get("paymentIntent") or {})
        elif kind == "payment_intent.expired":
            order = data.get("paymentIntent") or {}
            currency = str(order.get("currency") or "")
            deltas.add(merchant, livemode, FAILED, at, currency, "payment_expired", _minor(order.get("amount")))
        elif kind in ("refund.completed", "refund.failed"):
            _refund(conn, deltas, merchant, livemode, data.get("refund") or {}, at, kind.split(".")[1])
        elif kind in ("subscription.created", "subscription.canceled", "subscription.expired"):
            _subscription(conn, deltas, merchant, livemode, data, at, kind.split(".")[1])
    deltas.write(conn)


def apply_challenges(conn: Connection, rows: Iterable[Mapping[str, Any]]) -> None:
    """Count the challenges ``rows`` (``agent_challenges`` rows recorded for the first time in
    ``conn``'s transaction) as issued, in their endpoint's coin."""
    rows = list(rows)
    if not rows:
        return
    endpoints = tables.agent_endpoints
    ids = sorted({str(r["endpoint_id"]) for r in rows})
    coins = {
        str(e): str(c)
        for e, c in conn.execute(select(endpoints.c.id, endpoints.c.currency).where(endpoints.c.id.in_(ids)))
    }
    deltas = _Deltas()
    for r in rows:
        endpoint = str(r["endpoint_id"])
        created_at = r.get("created_at")
        if not isinstance(created_at, datetime):
            continue
        deltas.add(
            str(r["merchant_id"]),
            bool(r["livemode"]),
            CHALLENGED,
            created_at,
            str(coins.get(endpoint, "")),
            endpoint,
            int(r["amount_minor"]),
        )
    deltas.write(conn)


def apply_agent_failures(conn: Connection, rows: Iterable[Mapping[str, Any]]) -> None:
    """Count the agent payments ``rows`` (``merchant_id``, ``livemode``, ``currency``,
    ``amount_minor``, ``created_at`` and the x402 ``reason``), marked failed for the first time in
    ``conn``'s transaction, as failures by reason, on the hour the payment was made."""
    deltas = _Deltas()
    for r in rows:
        deltas.add(
            str(r["merchant_id"]),
            bool(r["livemode"]),
            FAILED,
            r["created_at"],
            str(r["currency"]),
            str(r["reason"]),
            int(r["amount_minor"] or 0),
        )
    deltas.write(conn)
