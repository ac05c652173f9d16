"""Platform settings, each also settable from an ``X402MW_*`` environment variable."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

__all__ = ["ChainSettings", "PlatformSettings", "default_checkout_url_base"]


def default_checkout_url_base(base_url: str) -> str:
    """The origin of ``base_url`` + ``/checkout``: ``http://127.0.0.1:4402/v1`` gives
    ``http://127.0.0.1:4402/checkout``."""
    parts = urlsplit(base_url)
    return f"{parts.scheme}://{parts.netloc}/checkout"


def _flag(name: str, value: str) -> bool:
    spelled = value.strip().lower()
    if spelled in ("1", "true", "yes", "on"):
        return True
    if spelled in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name} must be true or false, not {value!r}")


@dataclass
class ChainSettings:
    """One chain. ``rpc_url=None`` is the in-process dev chain. ``tokens`` names token addresses
    (``{"USDC": "0x..."}``) on chains the built-in table does not know, such as anvil."""

    rpc_url: str | None = None
    tokens: dict[str, str] = field(default_factory=dict)
    confirmations: int | None = None
    minter_key: str | None = None

    def __repr__(self) -> str:
        return f"ChainSettings(rpc_url={self.rpc_url!r}, tokens={self.tokens!r})"


@dataclass
class PlatformSettings:
    database_url: str = "sqlite:///.x402mw/platform.sqlite3"
    database_pool_size: int = 10  # PostgreSQL connections per process (twice as many under bursts)
    data_dir: Path = Path(".x402mw")
    chains: list[ChainSettings] = field(default_factory=lambda: [ChainSettings()])
    relayer_key: str | None = None
    receipt_key: str | None = None
    treasury_key: str | None = None  # holds merchants' money between payment and refund or payout
    deposit_seed: str | None = None  # 32 bytes of hex: the BIP-32 seed of every deposit address
    sealing_key: str | None = None  # 32 bytes of hex: encrypts stored webhook secrets
    base_url: str = "http://127.0.0.1:4402/v1"
    simulate: bool = True
    migrate: bool = True
    dev_fund_addresses: list[str] = field(default_factory=list)
    run_worker: bool = True
    checkout_url_base: str = ""  # default: the base URL's origin + "/checkout"
    # Seconds after which unfinished work (a settlement, a refund, a webhook delivery) whose process
    # seems to have stopped is taken over by another: sending it twice never moves money twice.
    takeover_seconds: float = 20.0
    # Test-mode webhooks to loopback and private addresses; None: only on the embedded default.
    webhooks_allow_private: bool | None = None
    # Redis (redis://host:port/db) shared by every serve process: the checkout rate limits count there
    redis_url: str | None = None

    def __post_init__(self) -> None:
        if not self.checkout_url_base:
            self.checkout_url_base = default_checkout_url_base(self.base_url)
        self.checkout_url_base = self.checkout_url_base.rstrip("/")

    @property
    def private_webhooks_allowed(self) -> bool:
        """Whether test-mode webhook endpoints may point at loopback and private addresses: as
        ``webhooks_allow_private`` says, else only on the embedded default (the in-process dev chain
        its only chain), where a developer tries a receiver on ``localhost``. Never link-local ones."""
        if self.webhooks_allow_private is not None:
            return self.webhooks_allow_private
        return [chain.rpc_url for chain in self.chains] == [None]

    def serve_at(self, base_url: str) -> None:
        """Set the base URL the platform is reached at; a checkout base derived from the old one follows."""
        if self.checkout_url_base == default_checkout_url_base(self.base_url):
            self.checkout_url_base = default_checkout_url_base(base_url)
        self.base_url = base_url

    @classmethod
    def from_env(cls, **overrides: object) -> PlatformSettings:
        """Settings from ``X402MW_DATABASE_URL``, ``X402MW_DATABASE_POOL_SIZE``, ``X402MW_DATA_DIR``,
        ``X402MW_RPC_URL`` (comma-separated), ``X402MW_RELAYER_KEY``, ``X402MW_RECEIPT_KEY``,
        ``X402MW_TREASURY_KEY``, ``X402MW_DEPOSIT_SEED``, ``X402MW_SEALING_KEY``, ``X402MW_BASE_URL``,
        ``X402MW_CHECKOUT_URL_BASE``, ``X402MW_TAKEOVER_SECONDS``, ``X402MW_WEBHOOKS_ALLOW_PRIVATE``
        (``true``/``false``, ``1``/``0``), ``X402MW_REDIS_URL``; ``overrides`` win."""
        env = os.environ
        settings = cls()
        if env.get("X402MW_DATA_DIR"):
            settings.data_dir = Path(env["X402MW_DATA_DIR"])
            settings.database_url = f"sqlite:///{settings.data_dir / 'platform.sqlite3'}"
        settings.database_url = env.get("X402MW_DATABASE_URL", settings.database_url)
        if env.get("X402MW_DATABASE_POOL_SIZE"):
            settings.database_pool_size = int(env["X402MW_DATABASE_POOL_SIZE"])
        if env.get("X402MW_RPC_URL"):
            settings.chains = [ChainSettings(rpc_url=u.strip()) for u in env["X402MW_RPC_URL"].split(",") if u.strip()]
        settings.relayer_key = env.get("X402MW_RELAYER_KEY") or None
        settings.receipt_key = env.get("X402MW_RECEIPT_KEY") or None
        settings.treasury_key = env.get("X402MW_TREASURY_KEY") or None
        settings.deposit_seed = env.get("X402MW_DEPOSIT_SEED") or None
        settings.sealing_key = env.get("X402MW_SEALING_KEY") or None
        settings.base_url = env.get("X402MW_BASE_URL", settings.base_url)
        settings.redis_url = env.get("X402MW_REDIS_URL") or None
        if env.get("X402MW_TAKEOVER_SECONDS"):
            settings.takeover_seconds = float(env["X402MW_TAKEOVER_SECONDS"])
        if allow_private := env.get("X402MW_WEBHOOKS_ALLOW_PRIVATE"):
            settings.webhooks_allow_private = _flag("X402MW_WEBHOOKS_ALLOW_PRIVATE", allow_private)
        for name, value in overrides.items():
            if value is not None:
                setattr(settings, name, value)
        checkout = overrides.get("checkout_url_base") or env.get("X402MW_CHECKOUT_URL_BASE")
        settings.checkout_url_base = str(checkout or default_checkout_url_base(settings.base_url)).rstrip("/")
        return settings

    def __repr__(self) -> str:
        return f"PlatformSettings(database_url={self.database_url!r}, chains={self.chains!r}, keys=<hidden>)"
