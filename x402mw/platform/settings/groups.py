"""The groups of settings `~x402mw.platform.settings.PlatformSettings` combines, one class each, and
`ChainSettings`, the settings of one chain."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import NoDecode

from x402mw.platform.settings.fields import (
    Address,
    CommaSeparated,
    Confirmations,
    DatabaseUrl,
    HttpUrl,
    LogFormat,
    LogLevel,
    Option,
    Port,
    PrivateKey,
    RpcUrl,
    Tokens,
    UrlBase,
)
from x402mw.platform.settings.problems import relation

MIN_POOL_SIZE = 4  # twice as many connections: six held by the batched writers, the rest for requests
_DATA_DIR = Path(".x402mw")


class ChainSettings(BaseModel):
    """One chain. ``rpc_url=None`` is the in-process dev chain. ``tokens`` names token addresses
    (``{"USDC": "0x..."}``) on chains the built-in table does not know, such as anvil;
    ``confirmations`` replaces the table's count; ``minter_key`` may mint the test tokens (the
    sandbox faucet on anvil). ``rpc_url`` may be a list of several providers of the chain (kept as
    ``rpc_url``, the first, and ``more_rpc_urls``): reads fail over between them and signed
    transactions go to every one (`x402mw.platform.chain.providers`). Its problems come as those of
    `PlatformSettings`' ``chains``; built on its own, it raises pydantic's error, which does not show
    the values it was given."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    rpc_url: RpcUrl | None = None
    more_rpc_urls: list[RpcUrl] = Field(default_factory=list)
    tokens: Tokens = Field(default_factory=dict)
    confirmations: Confirmations | None = None
    minter_key: PrivateKey | None = None

    @model_validator(mode="before")
    @classmethod
    def _several_providers(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("rpc_url"), list | tuple):
            urls = list(data["rpc_url"])
            if not urls:
                raise ValueError("rpc_url must name at least one URL")
            data = {**data, "rpc_url": urls[0], "more_rpc_urls": [*urls[1:], *data.get("more_rpc_urls", [])]}
        return data

    @property
    def rpc_urls(self) -> list[SecretStr]:
        """Every provider of the chain, the first one first (none: the in-process dev chain)."""
        return [self.rpc_url, *self.more_rpc_urls] if self.rpc_url is not None else []


class SettingsGroup(BaseModel):
    """A group of settings, combined into `PlatformSettings` (see `x402mw.platform.settings`)."""


class StorageSettings(SettingsGroup):
    """Where the platform keeps its state."""

    data_dir: Annotated[Path, Option("--data-dir", metavar="DIR")] = Field(
        _DATA_DIR, description="Where keys, the SQLite database and the dev chain live."
    )
    database_url: Annotated[
        DatabaseUrl,
        Option("--database-url", metavar="URL", default="sqlite in the data dir"),
    ] = Field(
        SecretStr(f"sqlite:///{_DATA_DIR / 'platform.sqlite3'}"),
        description="sqlite:///path or postgresql://user@host/db.",
    )
    database_pool_size: int = Field(
        10,
        ge=1,
        description=f"PostgreSQL connections each process keeps (twice as many under bursts); "
        f"at least {MIN_POOL_SIZE}, as six are held by the batched writes.",
    )

    @field_validator("database_pool_size")
    @classmethod
    def _enough_for_the_batched_writes(cls, size: int, info: ValidationInfo) -> int:
        url = info.data.get("database_url")
        if url is not None and url.get_secret_value().startswith("postgresql") and size < MIN_POOL_SIZE:
            raise ValueError(
                f"must be at least {MIN_POOL_SIZE} on PostgreSQL, not {size}: "
                "each process holds six connections for its batched writes"
            )
        return size


class ChainAccessSettings(SettingsGroup):
    """Which chains the platform settles on, and how it reaches them."""

    rpc_url: Annotated[
        list[RpcUrl],
        NoDecode,
        CommaSeparated,
        Option("--rpc-url", metavar="URL", multiple=True, default="the in-process dev chain"),
    ] = Field(
        default_factory=list,
        description="JSON-RPC URL of a chain; repeat for several (in the environment: comma-separated).",
    )
    tokens: Annotated[Tokens, NoDecode, Option("--token", metavar="SYMBOL=ADDRESS", multiple=True)] = Field(
        default_factory=dict,
        description="Token address on a chain the built-in table does not know, such as anvil; repeat for "
        "several (in the environment: separated by spaces).",
    )
    confirmations: Annotated[
        Confirmations | None, Option("--confirmations", metavar="N", default="the built-in table's; 1 elsewhere")
    ] = Field(None, description="Confirmations a payment waits for on each chain.")
    minter_key: PrivateKey | None = Field(
        None, description="Key that may mint the tokens of X402MW_TOKENS (the sandbox faucet on anvil)."
    )
    dev_fund_addresses: Annotated[list[Address], NoDecode, CommaSeparated] = Field(
        default_factory=list,
        description="Addresses the in-process dev chain gives test coins when it starts (comma-separated).",
    )
    chains: Annotated[list[ChainSettings], NoDecode] = Field(
        default_factory=lambda: [ChainSettings()],
        description='Chains one by one, as JSON: [{"rpc_url": ..., "tokens": {"USDC": ...}, "confirmations": ..., '
        '"minter_key": ...}] ("rpc_url" may be a list of several providers of the chain), instead of '
        "X402MW_RPC_URL, X402MW_TOKENS, X402MW_CONFIRMATIONS and X402MW_MINTER_KEY, which apply to every chain.",
    )

    relayer_pool_size: int = Field(
        0,
        ge=0,
        le=1000,
        description="Relayer accounts per chain reached over JSON-RPC, derived from the relayer key and leased "
        "by the processes (each sends only from accounts it holds); 0: the relayer key alone, shared by every "
        "process. Written to the database at start-up; `x402mw platform relayer-pool` changes it while running.",
    )
    relayer_pool_keys: Annotated[list[PrivateKey], NoDecode, CommaSeparated] = Field(
        default_factory=list,
        description="The pool's accounts as keys (comma-separated), instead of keys derived from the relayer key.",
    )
    relayer_in_flight_cap: int = Field(
        16, ge=1, le=1024, description="Transactions one relayer account of a pool may have in flight."
    )
    relayer_lease_seconds: float = Field(
        30.0,
        ge=3,
        le=3600,
        allow_inf_nan=False,
        description="How long a process holds a pool account without renewing it: a stopped process's "
        "accounts are taken over this long after it stopped.",
    )
    relayer_gas_floor_wei: int = Field(
        10**17,
        ge=0,
        description="A pool account whose gas balance falls below this many wei is topped up to twice as "
        "much from the relayer key's account.",
    )

    @field_validator("tokens", "minter_key")
    @classmethod
    def _on_a_chain_of_an_rpc_url(cls, value: Any, info: ValidationInfo) -> Any:
        if value and info.data.get("rpc_url") == []:
            raise relation("needs {rpc_url}: the in-process dev chain has tokens of its own", rpc_url="rpc_url")
        return value

    @field_validator("relayer_pool_size", "relayer_pool_keys")
    @classmethod
    def _on_a_chain_reached_over_json_rpc(cls, value: Any, info: ValidationInfo) -> Any:
        # Refused rather than ignored: pools apply to chains reached over JSON-RPC only, and a pool
        # asked for on the in-process dev chain alone would silently leave one relayer account.
        if value and "rpc_url" in info.data and "chains" in info.data:
            urls = info.data["rpc_url"] or [chain.rpc_url for chain in info.data["chains"]]
            if all(url is None for url in urls):
                raise relation(
                    "needs {rpc_url}: a relayer pool is for chains reached over JSON-RPC; the in-process dev "
                    "chain has one relayer account",
                    rpc_url="rpc_url",
                )
        return value

    @field_validator("chains", mode="before")
    @classmethod
    def _from_json(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"must be a JSON list of chains ({exc.msg} at character {exc.pos})") from None

    @field_validator("chains")
    @classmethod
    def _instead_of_the_common_settings(cls, chains: list[ChainSettings], info: ValidationInfo) -> list[ChainSettings]:
        given = [name for name in ("rpc_url", "tokens", "confirmations", "minter_key") if info.data.get(name)]
        if given:
            placeholders = ", ".join("{" + name + "}" for name in given)
            raise relation(f"cannot be given with {placeholders}", **{name: name for name in given})
        if not chains:
            raise ValueError("must name at least one chain")
        return chains


class KeySettings(SettingsGroup):
    """The platform's own keys; each one not given is created once in the data dir (mode 0600)."""

    relayer_key: PrivateKey | None = Field(None, description="Pays the gas of the transfers the platform sends.")
    relayer_signer_url: Annotated[RpcUrl | None, Option("--relayer-signer-url", metavar="URL")] = Field(
        None,
        description="A remote signer holding the relayer's key instead (the Ethereum remote-signing API as "
        "web3signer serves it in eth1 mode, /api/v1/eth1/sign): the key never enters the process.",
    )
    relayer_signer_address: Annotated[Address | None, Option("--relayer-signer-address", metavar="ADDRESS")] = Field(
        None, description="The relayer's account, whose key the remote signer holds."
    )
    receipt_key: PrivateKey | None = Field(None, description="Signs the receipts of agent payments.")
    treasury_key: PrivateKey | None = Field(
        None, description="Holds merchants' money between payment and refund or payout."
    )
    deposit_seed: PrivateKey | None = Field(None, description="BIP-32 seed of every deposit address (32 bytes).")
    sealing_key: PrivateKey | None = Field(None, description="Encrypts stored webhook secrets (32 bytes).")

    @field_validator("relayer_signer_url")
    @classmethod
    def _instead_of_a_key(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return value
        if info.data.get("relayer_key") is not None:
            raise relation(
                "cannot be given with {relayer_key}: the remote signer holds that key", relayer_key="relayer_key"
            )
        if info.data.get("relayer_pool_size") or info.data.get("relayer_pool_keys"):
            raise relation(
                "cannot be given with {relayer_pool_size}: a remote signer signs for one relayer account",
                relayer_pool_size="relayer_pool_size",
            )
        return value

    @field_validator("relayer_signer_address")
    @classmethod
    def _of_a_remote_signer(cls, value: Any, info: ValidationInfo) -> Any:
        if value is not None and info.data.get("relayer_signer_url") is None:
            raise relation("needs {relayer_signer_url}", relayer_signer_url="relayer_signer_url")
        return value


class ServerSettings(SettingsGroup):
    """Where ``serve`` listens and where the platform is reached."""

    host: Annotated[str, Option("--host", metavar="HOST")] = Field(
        "127.0.0.1", min_length=1, description="Address the API listens on."
    )
    port: Annotated[Port, Option("--port", metavar="PORT")] = Field(4402, description="Port the API listens on.")
    workers: Annotated[int, Option("--workers", metavar="N")] = Field(
        1,
        ge=1,
        description="Server processes, each with its own socket on the port (SO_REUSEPORT). Above 1 needs "
        "--rpc-url: the dev chain lives in one process.",
    )
    base_url: HttpUrl = Field(
        "http://127.0.0.1:4402/v1",
        description="URL the API is reached at; default: http://<host>:<port>/v1.",
    )
    checkout_url_base: UrlBase = Field(
        "", description="Where the hosted checkout pages live; default: the base URL's origin + /checkout."
    )
    redis_url: SecretStr | None = Field(
        None,
        description="Redis (redis://host:port/db) shared by every serve process: the checkout rate limits count "
        "there; default: each process counts in its own memory.",
    )


class LogSettings(SettingsGroup):
    """What a platform process logs, and how."""

    log_level: Annotated[LogLevel, Option("--log-level", metavar="LEVEL")] = Field(
        "info", description="critical, error, warning, info, debug or trace."
    )
    log_format: Annotated[LogFormat, Option("--log-format", metavar="[text|json]")] = Field(
        "text", description="json: one JSON object per line, with the id of the request each line was written for."
    )


class MetricsSettings(SettingsGroup):
    """The Prometheus metrics listener."""

    metrics_host: Annotated[str, Option("--metrics-host", metavar="HOST")] = Field(
        "127.0.0.1", min_length=1, description="Address of the metrics listener (keep it off the public network)."
    )
    metrics_port: Annotated[Port | None, Option("--metrics-port", metavar="PORT", default="not served")] = Field(
        None, description="Serve Prometheus metrics at http://<metrics host>:<port>/metrics."
    )


class WorkSettings(SettingsGroup):
    """How the platform does its work."""

    simulate: bool = Field(True, description="Simulate each transfer (eth_call) before sending it.")
    migrate: Annotated[bool | None, Option("--migrate", default="on SQLite only")] = Field(
        None,
        description="Bring the database schema up to date at start-up. Unset: serve and worker migrate a SQLite "
        "database themselves and refuse a PostgreSQL one that `x402mw platform migrate` has not brought up to date.",
    )
    run_worker: bool = Field(
        True, description="Run the worker duties (expiry, deposits, refunds, webhooks) in the server process."
    )
    drain_seconds: float = Field(
        25.0,
        gt=0,
        le=3600,
        allow_inf_nan=False,
        description="On SIGTERM, serve and worker take no new work and finish what they have within this many "
        "seconds, then exit (a second SIGTERM exits at once; what is left stays recoverable).",
    )
    # Unfinished work (a settlement, a refund, a webhook delivery) whose process seems to have stopped
    # is taken over by another after this long: sending it twice never moves money twice.
    takeover_seconds: float = Field(
        20.0,
        gt=0,
        allow_inf_nan=False,
        description="Seconds after which another process takes over work a stopped one left.",
    )
    webhooks_allow_private: Annotated[
        bool | None, Option("--webhooks-allow-private", default="only with the in-process dev chain")
    ] = Field(
        None,
        description="Let test-mode webhook endpoints point at loopback and private addresses (link-local ones never).",
    )


class SubscriptionSettings(SettingsGroup):
    """How subscriptions are kept and how their reminder emails are sent."""

    subscription_grace_days: int = Field(
        7, ge=0, le=365, description="Days a past-due subscription is kept before it expires (a plan may set its own)."
    )
    smtp_host: Annotated[str | None, Option("--smtp-host", metavar="HOST")] = Field(
        None, description="SMTP server for reminder emails; without one, each email is written to <data dir>/emails."
    )
    smtp_port: Port = Field(587, description="The SMTP server's port.")
    smtp_security: Literal["starttls", "tls", "none"] = Field(
        "starttls", description="starttls, tls (implicit, port 465) or none."
    )
    smtp_username: str | None = Field(None, description="The SMTP user name.")
    smtp_password: SecretStr | None = Field(None, description="The SMTP password.")
    smtp_sender: str = Field(
        "x402mw billing <billing@localhost>", min_length=3, description="The From address of reminder emails."
    )
