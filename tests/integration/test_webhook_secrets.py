"""Webhook signing secrets are stored sealed: the database holds no usable secret, the platform's
sealing key opens them, and another key cannot."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import select

from tests.harness import PlatformHarness
from x402mw.platform.db import tables
from x402mw.platform.sealing import SecretBox


def test_secrets_are_sealed_in_the_database(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant()
    with httpx.Client(base_url=dev_platform.url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as api:
        created = api.post("/webhook-endpoints", json={"url": "http://127.0.0.1:9/h", "enabledEvents": ["*"]})
        endpoint = created.json()["webhookEndpoint"]
        rotated = api.post(f"/webhook-endpoints/{endpoint['id']}/rotate-secret", json={"expiresInSeconds": 3600})
        new_secret = rotated.json()["webhookEndpoint"]["secret"]

    async def stored(platform: Any) -> Any:
        table = tables.webhook_endpoints
        async with platform.engine.connect() as conn:
            return (await conn.execute(select(table).where(table.c.id == endpoint["id"]))).mappings().one()

    row = dev_platform.server.call(stored)
    with httpx.Client(base_url=dev_platform.url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as api:
        assert api.delete(f"/webhook-endpoints/{endpoint['id']}").status_code == 200
    assert "whsec_" not in str(dict(row))
    box = dev_platform.platform.secrets
    assert box.open(row["secret"]) == new_secret
    assert box.open(row["previous_secrets"][0]["secret"]) == endpoint["secret"]
    with pytest.raises(ValueError, match="another key"):
        SecretBox(bytes(32)).open(row["secret"])


def test_a_secret_stored_before_sealing_is_read_as_it_is() -> None:
    box = SecretBox(bytes(range(32)))
    assert box.open("whsec_plain") == "whsec_plain"
    assert box.open(box.seal("whsec_x")) == "whsec_x" and box.seal("whsec_x") != box.seal("whsec_x")
    with pytest.raises(ValueError, match="32 bytes"):
        SecretBox(b"short")
