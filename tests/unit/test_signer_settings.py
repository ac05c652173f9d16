"""The remote signer's settings: its URL and the relayer's address go together, and neither a
relayer key nor a relayer pool (whose keys derive from the relayer's) is taken beside them."""

from __future__ import annotations

import pytest

from x402mw.platform.settings import PlatformSettings, SettingsError

URL, ADDRESS = "http://signer.internal:9000", "0x" + "ab" * 20
KEY = "0x" + "11" * 32


@pytest.mark.parametrize(
    ("environment", "problem"),
    [
        (
            {"X402MW_RELAYER_SIGNER_URL": URL},
            "X402MW_RELAYER_SIGNER_URL needs --relayer-signer-address: the account whose key it holds",
        ),
        ({"X402MW_RELAYER_SIGNER_ADDRESS": ADDRESS}, "X402MW_RELAYER_SIGNER_ADDRESS needs --relayer-signer-url"),
        (
            {"X402MW_RELAYER_SIGNER_URL": URL, "X402MW_RELAYER_SIGNER_ADDRESS": ADDRESS, "X402MW_RELAYER_KEY": KEY},
            "X402MW_RELAYER_SIGNER_URL cannot be given with X402MW_RELAYER_KEY",
        ),
        (
            {
                "X402MW_RELAYER_SIGNER_URL": URL,
                "X402MW_RELAYER_SIGNER_ADDRESS": ADDRESS,
                "X402MW_RPC_URL": "http://127.0.0.1:8545",
                "X402MW_RELAYER_POOL_SIZE": "4",
            },
            "X402MW_RELAYER_SIGNER_URL cannot be given with X402MW_RELAYER_POOL_SIZE",
        ),
    ],
)
def test_what_the_signer_settings_refuse(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], problem: str
) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as caught:
        PlatformSettings.from_env()
    assert problem in str(caught.value)


def test_the_signer_settings_together(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X402MW_RELAYER_SIGNER_URL", URL)
    monkeypatch.setenv("X402MW_RELAYER_SIGNER_ADDRESS", ADDRESS)
    settings = PlatformSettings.from_env()
    assert settings.relayer_signer_url is not None and settings.relayer_signer_url.get_secret_value() == URL
    assert settings.relayer_signer_address == ADDRESS and settings.relayer_key is None
