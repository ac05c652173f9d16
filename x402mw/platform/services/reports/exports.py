"""CSV exports of payments (orders), agent settlements, refunds and invoices over any range, in
bounded memory: rows are read a page at a time by keyset ``(instant, id) > last`` through an index
(never OFFSET), and each page is written out as CSV text before the next is read. Amounts appear
twice, as integers in the coin's base units and as decimal strings; never a float."""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Column, Table, literal, select, tuple_
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.platform.db import tables
from x402mw.protocol.prices import format_amount

DECIMALS = 6
PAGE = 1000


def _iso(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return "" if value is None else str(value)


def _money(value: Any) -> str:
    return "" if value is None else format_amount(int(value), DECIMALS)


@dataclass(frozen=True)
class ExportKind:
    """One export: its table, the instant it is ranged and ordered by, and its columns as
    (header, how a row gives the cell)."""

    table: Table
    instant: str
    columns: Sequence[tuple[str, Callable[[Any], str]]]
    where: Callable[[Table], Sequence[Any]] = lambda t: ()
    reads: Sequence[str] = ()  # the table's columns the cells read, besides the instant and the id


def _col(
    name: str, convert: Callable[[Any], str] = lambda v: "" if v is None else str(v)
) -> tuple[str, Callable[[Any], str]]:
    return name, lambda row: convert(row[name])


def _amount(header: str, name: str) -> list[tuple[str, Callable[[Any], str]]]:
    return [
        (f"{header}_base_units", lambda row: "" if row[name] is None else str(int(row[name]))),
        (header, lambda row: _money(row[name])),
    ]


KINDS: dict[str, ExportKind] = {
    "payments": ExportKind(
        tables.payment_intents,
        "created_at",
        [
            _col("id"),
            _col("order_id"),
            _col("status"),
            *_amount("amount", "amount_minor"),
            *_amount("amount_received", "amount_received_minor"),
            _col("currency"),
            _col("paid_currency"),
            _col("chain_id"),
            _col("payer"),
            _col("tx_hash"),
            _col("customer_email"),
            _col("created_at", _iso),
            _col("paid_at", _iso),
        ],
    ),
    "agent_settlements": ExportKind(
        tables.agent_payments,
        "settled_at",
        [
            _col("id"),
            _col("endpoint_id"),
            _col("challenge_id"),
            _col("status"),
            _col("scheme"),
            *_amount("amount", "amount_minor"),
            _col("currency"),
            _col("chain_id"),
            _col("payer"),
            _col("pay_to"),
            _col("transaction"),
            _col("created_at", _iso),
            _col("settled_at", _iso),
        ],
        lambda t: (t.c.status == "settled",),
    ),
    "refunds": ExportKind(
        tables.refunds,
        "created_at",
        [
            _col("id"),
            _col("payment_intent_id"),
            _col("status"),
            *_amount("amount", "amount_minor"),
            _col("currency"),
            _col("chain_id"),
            _col("destination"),
            _col("tx_hash"),
            _col("reason"),
            _col("failure_reason"),
            _col("created_at", _iso),
            _col("completed_at", _iso),
        ],
    ),
    "invoices": ExportKind(
        tables.subscription_invoices,
        "created_at",
        [
            _col("id"),
            _col("subscription_id"),
            _col("period"),
            _col("status"),
            *_amount("amount", "amount_minor"),
            _col("currency"),
            _col("payment_intent_id"),
            _col("period_start", _iso),
            _col("period_end", _iso),
            _col("created_at", _iso),
            _col("paid_at", _iso),
            _col("voided_at", _iso),
        ],
    ),
}
"""The exports, by the name in ``/v1/exports/{kind}.csv``."""
EXPORT_KINDS = KINDS


def _read_columns(spec: ExportKind) -> list[str]:
    """The columns a kind's cells read (those of `_col` and `_amount`, by the name they carry)."""
    names = []
    for header, _ in spec.columns:
        name = header.removesuffix("_base_units")
        names.append(_SOURCES.get(name, name))
    return [n for n in names if n in spec.table.c]


_SOURCES = {"amount": "amount_minor", "amount_received": "amount_received_minor"}


def _line(cells: Sequence[str]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\r\n").writerow([_safe(c) for c in cells])
    return out.getvalue()


def _safe(cell: str) -> str:
    """A cell a spreadsheet will not take for a formula (CSV injection): one starting with = + - @
    (other than a number) is prefixed with an apostrophe."""
    if cell and cell[0] in "=+-@\t\r" and not _numeric(cell):
        return "'" + cell
    return cell


def _numeric(cell: str) -> bool:
    try:
        int(cell)
    except ValueError:
        return False
    return True


async def export_csv(
    engine: AsyncEngine,
    kind: str,
    merchant_id: str,
    livemode: bool,
    start: datetime,
    end: datetime,
    *,
    page: int = PAGE,
) -> AsyncIterator[bytes]:
    """The CSV of the merchant's ``kind`` (a key of `KINDS`) whose instant is in [start, end),
    oldest first: a header line, then one chunk per page of rows."""
    spec = KINDS[kind]
    t = spec.table
    instant: Column[Any] = t.c[spec.instant]
    yield _line([name for name, _ in spec.columns]).encode()
    after: tuple[datetime, str] | None = None
    while True:
        where = [
            t.c.merchant_id == merchant_id,
            t.c.livemode == livemode,
            instant >= start,
            instant < end,
            *spec.where(t),
        ]
        if after is not None:
            where.append(tuple_(instant, t.c.id) > tuple_(literal(after[0], instant.type), literal(after[1])))
        names = dict.fromkeys([spec.instant, "id", *_read_columns(spec)])
        query = select(*(t.c[name] for name in names)).where(*where).order_by(instant, t.c.id).limit(page)
        async with engine.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        if not rows:
            return
        yield "".join(_line([cell(row) for _, cell in spec.columns]) for row in rows).encode()
        if len(rows) < page:
            return
        last = rows[-1]
        after = (last[spec.instant], str(last["id"]))
