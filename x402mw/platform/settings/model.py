"""`PlatformSettings`: every setting of a platform process, in one model."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from x402mw.platform.settings.fields import ENV_PREFIX, default_checkout_url_base, env_variable, option_of
from x402mw.platform.settings.groups import (
    ChainAccessSettings,
    ChainSettings,
    KeySettings,
    LogSettings,
    MetricsSettings,
    ServerSettings,
    StorageSettings,
    SubscriptionSettings,
    WorkSettings,
)
from x402mw.platform.settings.problems import SettingsError, describe, relation

_CHAIN_FIELDS = ("rpc_url", "tokens", "confirmations", "minter_key")


class PlatformSettings(
    SubscriptionSettings,
    WorkSettings,
    MetricsSettings,
    LogSettings,
    ServerSettings,
    KeySettings,
    ChainAccessSettings,
    StorageSettings,
    BaseSettings,
):
    """Every setting of a platform process (see `x402mw.platform.settings`).

    ``database_url`` defaults to SQLite in ``data_dir``; ``base_url`` to ``http://<host>:<port>/v1``;
    ``checkout_url_base`` to the base URL's origin + ``/checkout``; ``chains`` to one chain per
    ``rpc_url`` with ``tokens``, ``confirmations`` and ``minter_key``, or the in-process dev chain.
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_ignore_empty=True, validate_default=False, extra="forbid", hide_input_in_errors=True
    )

    if not TYPE_CHECKING:  # keep the pydantic mypy plugin's typed __init__

        def __init__(self, **values: Any) -> None:
            """Report every problem as one `SettingsError`, never as a pydantic error, whose text would
            show the secrets it was given. ``_names`` names the fields as they were given."""
            names: Mapping[str, str] = values.pop("_names", None) or {}
            try:
                super().__init__(**values)
            except ValidationError as exc:
                problems = describe(exc, type(self), lambda field: names.get(field, field))
            else:
                return
            raise SettingsError(problems)  # outside the except: the pydantic error is not its context

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)  # the environment only through from_env and from_options

    @classmethod
    def from_env(cls, **values: object) -> PlatformSettings:
        """Settings from the ``X402MW_*`` environment variables, under ``values`` (those not None)."""
        return cls._load(values, given_as=lambda name: name)

    @classmethod
    def from_options(cls, options: Mapping[str, object]) -> PlatformSettings:
        """Settings from command-line ``options`` (by field name; None for an option not given) over
        the ``X402MW_*`` environment variables; problems name each option as the command line
        spells it."""
        return cls._load(options, given_as=lambda name: cls._option_name(name) or name)

    @classmethod
    def _option_name(cls, name: str) -> str | None:
        field = cls.model_fields.get(name)
        option = option_of(field) if field is not None else None
        return option.flag if option is not None else None

    @classmethod
    def _load(cls, values: Mapping[str, object], given_as: Callable[[str], str]) -> PlatformSettings:
        found = EnvSettingsSource(cls)()
        given = {name: value for name, value in values.items() if value is not None}
        names = {name: cls._option_name(name) or env_variable(name) for name in cls.model_fields}
        names |= {name: env_variable(name) for name in found} | {name: given_as(name) for name in given}
        values_and_names: dict[str, Any] = {**found, **given, "_names": names}
        return cls(**values_and_names)

    @field_validator("workers")
    @classmethod
    def _one_unless_the_chains_are_shared(cls, workers: int, info: ValidationInfo) -> int:
        if workers > 1 and "rpc_url" in info.data and "chains" in info.data:
            chains = info.data["rpc_url"] or [chain.rpc_url for chain in info.data["chains"]]
            if None in chains:
                raise relation(
                    "above 1 needs {rpc_url}: the in-process dev chain lives in one process", rpc_url="rpc_url"
                )
        return workers

    @model_validator(mode="after")
    def _derive_defaults(self) -> PlatformSettings:
        given = set(self.model_fields_set)
        if self.relayer_signer_url is not None and self.relayer_signer_address is None:
            raise relation(
                "{relayer_signer_url} needs {relayer_signer_address}: the account whose key it holds",
                relayer_signer_url="relayer_signer_url",
                relayer_signer_address="relayer_signer_address",
            )
        if "database_url" not in given:
            self.database_url = SecretStr(f"sqlite:///{self.data_dir / 'platform.sqlite3'}")
        if "base_url" not in given:
            host = f"[{self.host}]" if ":" in self.host else self.host
            self.base_url = f"http://{host}:{self.port}/v1"
        self.checkout_url_base = (self.checkout_url_base or default_checkout_url_base(self.base_url)).rstrip("/")
        if "chains" not in given and self.rpc_url:
            self.chains = [
                ChainSettings(
                    rpc_url=url, tokens=self.tokens, confirmations=self.confirmations, minter_key=self.minter_key
                )
                for url in self.rpc_url
            ]
        elif "chains" not in given and self.confirmations is not None:
            self.chains = [ChainSettings(confirmations=self.confirmations)]
        # What was derived was not given: model_fields_set keeps saying what was.
        self.__pydantic_fields_set__.intersection_update(given)
        return self

    @property
    def migrates_on_start(self) -> bool:
        """Whether ``serve`` and ``worker`` migrate the database as they start: as ``migrate`` says,
        else only a SQLite database (embedded, on one host). A PostgreSQL database, shared by every
        process, is migrated as a step of its own (``x402mw platform migrate``)."""
        if self.migrate is not None:
            return self.migrate
        return self.database_url.get_secret_value().startswith("sqlite")

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

    def as_environment(self) -> dict[str, str]:
        """These settings as ``X402MW_*`` variables that `from_env` reads back, secrets revealed: for
        the environment of the processes ``serve --workers N`` starts, and nothing else."""
        chains_given = "chains" in self.model_fields_set
        environment = {}
        for name in type(self).model_fields:
            if (name == "chains" and not chains_given) or (name in _CHAIN_FIELDS and chains_given):
                continue
            text = _as_text(getattr(self, name))
            if text:
                environment[env_variable(name)] = text
        return environment


def _as_text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict):
        return " ".join(f"{key}={item}" for key, item in value.items())
    if isinstance(value, list) and value and isinstance(value[0], ChainSettings):
        return json.dumps([_revealed(chain) for chain in value])
    if isinstance(value, list):
        return ",".join(_as_text(item) or "" for item in value)
    return str(value)


def _revealed(chain: ChainSettings) -> dict[str, object]:
    revealed: dict[str, object] = {}
    for name, value in chain:
        if isinstance(value, list):
            if value:  # more_rpc_urls
                revealed[name] = [_as_text(item) for item in value]
        else:
            revealed[name] = _as_text(value) if isinstance(value, SecretStr) else value
    return revealed
