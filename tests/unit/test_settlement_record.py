"""`Claimed`, the plain record settlement builds per payment, is the ``agent_payments`` row: the
same columns, and the same row to insert as the `AgentPayment` table model would give."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from x402mw.platform.db import tables
from x402mw.platform.db.models import AgentPayment
from x402mw.platform.services.settlement.outcomes import Claimed


def test_its_fields_are_the_tables_columns() -> None:
    assert {field.name for field in dataclasses.fields(Claimed)} == set(tables.agent_payments.c.keys())


def test_its_row_is_the_table_models() -> None:
    values = {
        "id": "pay_1",
        "merchant_id": "mer_1",
        "endpoint_id": "ep_1",
        "challenge_id": "ch_1",
        "livemode": True,
        "chain_id": 8453,
        "asset": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
        "currency": "USDC",
        "payer": "0x" + "11" * 20,
        "nonce": "0x" + "22" * 32,
        "pay_to": "0x" + "33" * 20,
        "amount_minor": 10_000,
        "payload_hash": "ab" * 32,
        "resource": "https://seller.example/weather",
        "release_policy": "confirmed",
        "status": "claimed",
        "created_at": datetime(2026, 11, 23, 12, 0, tzinfo=UTC),
    }
    assert Claimed(**values).row() == AgentPayment(**values).model_dump()


def test_the_batched_record_statements_run_as_one_executemany() -> None:
    # An expanding parameter (`status IN (...)`) makes SQLAlchemy run an executemany row by row: it
    # once made recording a batch of submitted settlements forty times slower under load.
    from sqlalchemy.dialects import postgresql
    from sqlalchemy.ext.asyncio import create_async_engine

    from x402mw.platform.services.settlement.writes import SettlementWrites

    writes = SettlementWrites(create_async_engine("postgresql+asyncpg://nobody@127.0.0.1:1/none"))
    statements = [*writes._mark.values(), writes._link_challenges]
    for statement in statements:
        assert "POSTCOMPILE" not in str(statement.compile(dialect=postgresql.dialect())), statement
