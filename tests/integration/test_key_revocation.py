"""A revoked API key is refused by every platform process from the moment the revocation returns
(spec 5: "when the key is missing, invalid or revoked, the response is 401"), whichever process
or command revoked it, and in both header forms.

The platform under test (``dev_platform``, one ``serve``) has just answered the key, so a
process-local cache of it would still hold it; the revocation is made elsewhere: by a second
platform instance's key ring on its own engine (what another ``serve`` process holds), and by the
``x402mw platform keys revoke`` command."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import pytest
from click.testing import CliRunner

from tests.harness import PlatformHarness
from x402mw.cli import main
from x402mw.platform.db.engine import create_engine_for
from x402mw.platform.services.merchants import KeyRing

pytestmark = (
    pytest.mark.both_databases
)  # a revocation reaches other processes: PostgreSQL's LISTEN/NOTIFY, SQLite's polling

FORMS: dict[str, Callable[[str], dict[str, str]]] = {
    "bearer": lambda key: {"Authorization": f"Bearer {key}"},
    "x-api-key": lambda key: {"x-api-key": key},
}


def _status(harness: PlatformHarness, key: str, form: str) -> int:
    return httpx.get(f"{harness.url}/agent/endpoints", headers=FORMS[form](key), timeout=30).status_code


def _revoke_in_another_instance(harness: PlatformHarness, key_id: str) -> None:
    async def revoke() -> bool:
        engine = create_engine_for(harness.server.settings.database_url.get_secret_value())
        try:
            return await KeyRing(engine).revoke(key_id)
        finally:
            await engine.dispose()

    assert asyncio.run(revoke())


def _revoke_with_the_cli(harness: PlatformHarness, key_id: str) -> None:
    settings = harness.server.settings
    options = ["--database-url", settings.database_url.get_secret_value(), "--data-dir", str(settings.data_dir)]
    result = CliRunner().invoke(main, ["platform", "keys", "revoke", key_id, *options])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("revoke", [_revoke_in_another_instance, _revoke_with_the_cli], ids=["instance", "cli"])
def test_a_key_revoked_elsewhere_is_refused_by_the_next_request(
    dev_platform: PlatformHarness, form: str, revoke: Callable[[PlatformHarness, str], None]
) -> None:
    revoke(dev_platform, dev_platform.merchant()[2])  # the command's imports and migration check, before the clock runs
    _, key, key_id = dev_platform.merchant()
    other = "x-api-key" if form == "bearer" else "bearer"
    assert _status(dev_platform, key, form) == 200
    assert _status(dev_platform, key, other) == 200
    revoke(dev_platform, key_id)
    assert _status(dev_platform, key, form) == 401  # the very next request
    assert _status(dev_platform, key, other) == 401
