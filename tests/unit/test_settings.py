"""The platform's settings: one model read from ``X402MW_*`` variables and filled by the command
line's options, every problem reported at once, secrets never shown."""

from __future__ import annotations

import io
import json
import logging
import secrets
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from pydantic import BaseModel, SecretStr, ValidationError

from x402mw.cli import main
from x402mw.cli_options import _settings
from x402mw.errors import ConfigurationError
from x402mw.platform.logs import JsonFormatter
from x402mw.platform.settings import (
    ChainSettings,
    PlatformSettings,
    SettingsError,
    env_variable,
    option_of,
    shown_url,
)

KEY = "0x" + "ab" * 32
USDC = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
EURC = "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512"
ANVIL = "http://127.0.0.1:8545"

# One value of every setting, as its variable spells it and as the model holds it (secrets revealed).
SAMPLES: dict[str, tuple[str, object]] = {
    "data_dir": ("/srv/x402mw", Path("/srv/x402mw")),
    "database_url": ("postgresql://app@db.internal/x402mw", "postgresql://app@db.internal/x402mw"),
    "database_pool_size": ("6", 6),
    "rpc_url": (f"{ANVIL}, https://node.example/v2", [ANVIL, "https://node.example/v2"]),
    "tokens": (f"USDC={USDC} eurc={EURC}", {"USDC": USDC, "EURC": EURC}),
    "confirmations": ("3", 3),
    "minter_key": (KEY, KEY),
    "dev_fund_addresses": (f"{USDC},{EURC}", [USDC, EURC]),
    "chains": (
        json.dumps([{"rpc_url": [ANVIL, "https://node.example/v2"], "tokens": {"usdc": USDC}, "confirmations": 2}]),
        [
            {
                "rpc_url": ANVIL,
                "more_rpc_urls": ["https://node.example/v2"],
                "tokens": {"USDC": USDC},
                "confirmations": 2,
                "minter_key": None,
            }
        ],
    ),
    "relayer_key": (KEY, KEY),
    "relayer_signer_url": ("https://signer.internal:9000", "https://signer.internal:9000"),
    "relayer_signer_address": (EURC, EURC),
    "relayer_pool_size": ("8", 8),
    "relayer_pool_keys": (f"{KEY},{KEY[:-2]}cd", [KEY, KEY[:-2] + "cd"]),
    "relayer_in_flight_cap": ("12", 12),
    "relayer_lease_seconds": ("15", 15.0),
    "relayer_gas_floor_wei": ("5000000000000000", 5 * 10**15),
    "receipt_key": (KEY, KEY),
    "treasury_key": (KEY, KEY),
    "deposit_seed": (KEY, KEY),
    "sealing_key": (KEY, KEY),
    "host": ("0.0.0.0", "0.0.0.0"),
    "port": ("8080", 8080),
    "workers": ("3", 3),
    "base_url": ("https://pay.example/v1", "https://pay.example/v1"),
    "checkout_url_base": ("https://pay.example/checkout/", "https://pay.example/checkout"),
    "log_level": ("WARNING", "warning"),
    "log_format": ("json", "json"),
    "metrics_host": ("10.0.0.5", "10.0.0.5"),
    "metrics_port": ("9402", 9402),
    "simulate": ("false", False),
    "migrate": ("0", False),
    "run_worker": ("off", False),
    "takeover_seconds": ("2.5", 2.5),
    "drain_seconds": ("12.5", 12.5),
    "webhooks_allow_private": ("yes", True),
    "redis_url": ("redis://:hush@127.0.0.1:6379/0", "redis://:hush@127.0.0.1:6379/0"),
    "subscription_grace_days": ("3", 3),
    "smtp_host": ("mail.example", "mail.example"),
    "smtp_port": ("465", 465),
    "smtp_security": ("tls", "tls"),
    "smtp_username": ("billing", "billing"),
    "smtp_password": ("hush", "hush"),
    "smtp_sender": ("Shop <billing@shop.example>", "Shop <billing@shop.example>"),
}
# What some settings need beside them to be valid.
NEEDS = {
    "tokens": "rpc_url",
    "minter_key": "rpc_url",
    "workers": "rpc_url",
    "relayer_pool_size": "rpc_url",
    "relayer_pool_keys": "rpc_url",
    "relayer_signer_url": "relayer_signer_address",  # each needs the other
    "relayer_signer_address": "relayer_signer_url",
}


def _revealed(value: object) -> object:
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, BaseModel):
        return {name: _revealed(item) for name, item in value}
    if isinstance(value, list):
        return [_revealed(item) for item in value]
    return value


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PlatformSettings.model_fields:
        monkeypatch.delenv(env_variable(name), raising=False)


def _command(name: str) -> click.Command:
    return main.commands["platform"].commands[name]  # type: ignore[attr-defined, no-any-return]


def _from_command_line(command: str, args: list[str]) -> PlatformSettings:
    """The settings the command would run with, given ``args``."""
    return _settings(_command(command).make_context(command, args).params)


def test_the_samples_cover_every_setting() -> None:
    assert set(SAMPLES) == set(PlatformSettings.model_fields)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_every_setting_has_its_variable(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    text, held = SAMPLES[name]
    monkeypatch.setenv(env_variable(name), text)
    if name in NEEDS:
        monkeypatch.setenv(env_variable(NEEDS[name]), SAMPLES[NEEDS[name]][0])
    assert _revealed(getattr(PlatformSettings.from_env(), name)) == held
    assert _revealed(getattr(PlatformSettings(), name)) != held  # in code: what the code gives, and defaults


# The sample of each setting with an option, on the command line; and another value in its variable.
ARGUMENTS = {
    "rpc_url": ["--rpc-url", ANVIL, "--rpc-url", "https://node.example/v2"],
    "tokens": ["--token", f"USDC={USDC}", "--token", f"eurc={EURC}"],
    "webhooks_allow_private": ["--webhooks-allow-private"],
    "migrate": ["--no-migrate"],
}
ELSEWHERE = {
    "smtp_host": "mail.elsewhere",
    "data_dir": "/elsewhere",
    "database_url": "sqlite:///elsewhere.sqlite3",
    "rpc_url": "http://127.0.0.1:1",
    "tokens": f"EURC={USDC}",
    "confirmations": "9",
    "host": "127.0.0.2",
    "port": "1",
    "workers": "1",
    "log_level": "debug",
    "log_format": "text",
    "metrics_host": "127.0.0.3",
    "metrics_port": "1",
    "webhooks_allow_private": "false",
    "migrate": "true",
    "relayer_signer_url": "http://127.0.0.1:9",
    "relayer_signer_address": USDC,
}


@pytest.mark.parametrize(
    "name", sorted(name for name, info in PlatformSettings.model_fields.items() if option_of(info) is not None)
)
def test_every_option_fills_the_same_setting_over_its_variable(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    option = option_of(PlatformSettings.model_fields[name])
    assert option is not None
    text, held = SAMPLES[name]
    monkeypatch.setenv(env_variable(name), ELSEWHERE[name])
    args = ARGUMENTS.get(name, [option.flag, text])
    if NEEDS.get(name) == "rpc_url":
        args += ["--rpc-url", ANVIL]
    elif name in NEEDS:
        monkeypatch.setenv(env_variable(NEEDS[name]), SAMPLES[NEEDS[name]][0])
    assert _revealed(getattr(_from_command_line("serve", args), name)) == held


def test_the_command_line_reads_no_environment_of_its_own_and_help_names_each_variable() -> None:
    for command in main.commands["platform"].commands.values():  # type: ignore[attr-defined]
        for sub in getattr(command, "commands", {"": command}).values():
            assert all(param.envvar is None for param in sub.params), sub.name
    serve = CliRunner().invoke(main, ["platform", "serve", "--help"], terminal_width=200).output
    for name, info in PlatformSettings.model_fields.items():
        option = option_of(info)
        if option is not None:
            assert f"{option.flag} " in serve and f"env var: {env_variable(name)}" in serve, name
        else:  # the epilog lists the settings without an option
            assert env_variable(name) in serve, name
    for command in ("worker", "migrate"):
        text = CliRunner().invoke(main, ["platform", command, "--help"], terminal_width=200).output
        assert "--database-url URL" in text and "env var: X402MW_DATABASE_URL" in text, command


def test_derived_defaults() -> None:
    settings = PlatformSettings(data_dir=Path("/srv/data"), host="::1", port=9000)
    assert settings.database_url.get_secret_value() == "sqlite:////srv/data/platform.sqlite3"
    assert settings.base_url == "http://[::1]:9000/v1"
    assert settings.checkout_url_base == "http://[::1]:9000/checkout"
    assert settings.chains == [ChainSettings()] and settings.private_webhooks_allowed
    assert settings.model_fields_set == {"data_dir", "host", "port"}  # what was derived was not given
    settings.serve_at("https://pay.example/v1")
    assert (settings.base_url, settings.checkout_url_base) == ("https://pay.example/v1", "https://pay.example/checkout")
    kept = PlatformSettings(checkout_url_base="https://shop.example/pay/")
    kept.serve_at("https://pay.example/v1")
    assert kept.checkout_url_base == "https://shop.example/pay"
    chains = PlatformSettings(rpc_url=[ANVIL, "https://node.example"], tokens=[f"usdc={USDC}"], confirmations=2)
    assert [(_revealed(chain.rpc_url), chain.tokens, chain.confirmations) for chain in chains.chains] == [
        (ANVIL, {"USDC": USDC}, 2),
        ("https://node.example", {"USDC": USDC}, 2),
    ]
    assert not chains.private_webhooks_allowed
    assert PlatformSettings(confirmations=4).chains == [ChainSettings(confirmations=4)]


def test_options_win_over_variables_and_code_over_both(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X402MW_PORT", "5000")
    monkeypatch.setenv("X402MW_RPC_URL", "http://127.0.0.1:1,http://127.0.0.1:2")
    assert PlatformSettings().port == 4402
    assert PlatformSettings.from_env().port == 5000
    assert PlatformSettings.from_env(port=6000, host=None).port == 6000
    settings = _from_command_line("serve", ["--port", "7000", "--rpc-url", f"{ANVIL},https://node.example"])
    assert settings.port == 7000 and settings.base_url == "http://127.0.0.1:7000/v1"
    assert [_revealed(chain.rpc_url) for chain in settings.chains] == [ANVIL, "https://node.example"]


def test_every_problem_at_once_each_named_as_it_was_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X402MW_PORT", "abc")
    monkeypatch.setenv("X402MW_WEBHOOKS_ALLOW_PRIVATE", "maybe")
    monkeypatch.setenv("X402MW_DATABASE_URL", "postgresql://db/x")
    monkeypatch.setenv("X402MW_DATABASE_POOL_SIZE", "2")
    monkeypatch.setenv("X402MW_TAKEOVER_SECONDS", "0")
    options = {"workers": "2", "log_level": "loud", "metrics_port": "70000", "tokens": ("USDC", f"EURC={EURC}")}
    with pytest.raises(SettingsError) as caught:
        PlatformSettings.from_options(options)
    assert caught.value.problems == [
        "X402MW_DATABASE_POOL_SIZE must be at least 4 on PostgreSQL, not 2: "
        "each process holds six connections for its batched writes",
        "--token must be SYMBOL=ADDRESS, not 'USDC'",
        "X402MW_PORT must be a whole number, not 'abc'",
        "--workers above 1 needs --rpc-url: the in-process dev chain lives in one process",
        "--log-level is 'loud'; the log level must be one of critical, error, warning, info, debug or trace",
        "--metrics-port must be at most 65535, not '70000'",
        "X402MW_TAKEOVER_SECONDS must be more than 0, not '0'",
        "X402MW_WEBHOOKS_ALLOW_PRIVATE must be true or false, not 'maybe'",
    ]
    assert isinstance(caught.value, ConfigurationError) and isinstance(caught.value, ValueError)
    with pytest.raises(SettingsError) as in_code:
        PlatformSettings(port="abc", tokens={"usdc": USDC}, chains=[], colour="blue")
    assert in_code.value.problems == [
        "tokens needs rpc_url: the in-process dev chain has tokens of its own",
        "chains must name at least one chain",
        "port must be a whole number, not 'abc'",
        "colour is not a setting",
    ]


def test_chains_one_by_one_or_the_common_settings_not_both(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X402MW_CHAINS", SAMPLES["chains"][0])
    monkeypatch.setenv("X402MW_RPC_URL", ANVIL)
    with pytest.raises(click.UsageError) as caught:
        _from_command_line("worker", ["--confirmations", "2"])
    assert caught.value.message == "X402MW_CHAINS cannot be given with X402MW_RPC_URL, --confirmations"
    monkeypatch.setenv("X402MW_CHAINS", "[{")
    monkeypatch.delenv("X402MW_RPC_URL")
    with pytest.raises(SettingsError, match=r"X402MW_CHAINS must be a JSON list of chains \("):
        PlatformSettings.from_env()


def test_a_usage_error_lists_every_problem_without_a_traceback() -> None:
    args = ["platform", "serve", "--workers", "2", "--port", "x", "--log-format", "xml", "--rpc-url", "ftp://n"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)
    assert "Error: 3 problems with the settings:" in result.output
    assert "  - --rpc-url (item 1) must be an http(s) URL with a host\n" in result.output
    assert "  - --port must be a whole number, not 'x'\n" in result.output
    assert "  - --log-format is 'xml'; the log format must be one of text or json\n" in result.output
    assert "Traceback" not in result.output


SECRET_ENVIRONMENT = {
    "X402MW_RELAYER_KEY": secrets.token_hex(32),
    "X402MW_RECEIPT_KEY": "0x" + secrets.token_hex(32),
    "X402MW_TREASURY_KEY": secrets.token_hex(32),
    "X402MW_DEPOSIT_SEED": secrets.token_hex(32),
    "X402MW_SEALING_KEY": secrets.token_hex(32),
    "X402MW_MINTER_KEY": secrets.token_hex(32),
    "X402MW_DATABASE_URL": "postgresql://app:db-password-4471@db.internal/x402mw",
    "X402MW_RPC_URL": "https://user:rpc-password-8812@node.example/v2/api-key-9923",
}
SECRET_TEXTS = [
    *(value.removeprefix("0x") for value in SECRET_ENVIRONMENT.values() if "://" not in value),
    "db-password-4471",
    "rpc-password-8812",
    "api-key-9923",
]


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """What the logger ``x402mw.tests.settings`` writes, as text lines and as JSON lines."""
    stream = io.StringIO()
    handlers = [logging.StreamHandler(stream), logging.StreamHandler(stream)]
    handlers[1].setFormatter(JsonFormatter())
    logger = logging.getLogger("x402mw.tests.settings")
    for handler in handlers:
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        for handler in handlers:
            logger.removeHandler(handler)


def test_secrets_never_show(monkeypatch: pytest.MonkeyPatch, captured: io.StringIO) -> None:
    for name, value in SECRET_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    settings = PlatformSettings.from_env(tokens=[f"USDC={USDC}"])
    logging.getLogger("x402mw.tests.settings").info("settings %s %r %s", settings, settings, settings.chains)
    shown = [
        repr(settings),
        str(settings),
        repr(settings.model_dump()),
        settings.model_dump_json(),
        json.dumps(settings.model_dump(mode="json")),
        captured.getvalue(),
    ]
    for text in shown:
        assert not [secret for secret in SECRET_TEXTS if secret in text], text
    assert settings.model_dump(mode="json")["relayer_key"] == "**********"
    assert settings.chains[0].rpc_url is not None
    assert shown_url(settings.chains[0].rpc_url) == "https://node.example"
    assert _revealed(settings.chains[0].rpc_url) == SECRET_ENVIRONMENT["X402MW_RPC_URL"]  # for the code that uses it


def _bad_secrets() -> dict[str, str]:
    return {
        "X402MW_RELAYER_KEY": "hunter2-is-no-key",
        "X402MW_SEALING_KEY": "ab" * 31 + "hunter2",
        "X402MW_DATABASE_URL": "mysql://app:hunter2@db/x",
        "X402MW_RPC_URL": "ftp://user:hunter2@node.example",
        "X402MW_MINTER_KEY": "hunter2",
    }


def test_a_problem_with_a_secret_never_shows_it(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in _bad_secrets().items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as caught:
        PlatformSettings.from_env()
    assert len(caught.value.problems) == 5, caught.value.problems
    assert caught.value.__context__ is None and caught.value.__cause__ is None  # no pydantic error inside
    assert "hunter2" not in str(caught.value)
    chains = json.dumps([{"rpc_url": "ftp://u:hunter2@node.example", "minter_key": "hunter2"}])
    with pytest.raises(SettingsError) as caught:
        PlatformSettings(chains=chains)
    assert caught.value.problems == [
        "chains (item 1, rpc_url) must be an http(s) URL with a host",
        "chains (item 1, minter_key) must be 32 bytes of hex (64 hex digits, 0x optional)",
    ]
    with pytest.raises(ValidationError) as pydantic_error:
        ChainSettings(rpc_url="ftp://u:hunter2@node.example")
    assert "hunter2" not in str(pydantic_error.value)
    result = CliRunner().invoke(main, ["platform", "worker", "--rpc-url", "http://u:hunter2@node example"])
    assert result.exit_code == 2 and "hunter2" not in result.output, result.output


@pytest.mark.parametrize("chains_one_by_one", [False, True])
def test_the_environment_serve_gives_its_workers_holds_the_same_settings(
    monkeypatch: pytest.MonkeyPatch, chains_one_by_one: bool
) -> None:
    for name, value in SECRET_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    if chains_one_by_one:
        monkeypatch.delenv("X402MW_RPC_URL")
        monkeypatch.delenv("X402MW_MINTER_KEY")
        monkeypatch.setenv("X402MW_CHAINS", SAMPLES["chains"][0])
    args = ["--port", "0", "--workers", "2", "--no-webhooks-allow-private", "--log-format", "json"]
    settings = _from_command_line("serve", args + ([] if chains_one_by_one else ["--token", f"USDC={USDC}"]))
    environment = settings.as_environment()
    for name in PlatformSettings.model_fields:
        monkeypatch.delenv(env_variable(name), raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    again = PlatformSettings.from_env()
    assert _revealed(again) == _revealed(settings)
    assert ("X402MW_CHAINS" in environment) is chains_one_by_one


def test_a_chain_given_one_by_one_reports_like_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    chains = [{"rpc_url": ANVIL, "tokens": "USDC=0x1", "confirmations": 0}, {"colour": "blue"}]
    monkeypatch.setenv("X402MW_CHAINS", json.dumps(chains))
    with pytest.raises(SettingsError) as caught:
        PlatformSettings.from_env()
    assert caught.value.problems == [
        "X402MW_CHAINS (item 1, tokens, USDC) must be an address (0x and 40 hex digits), not '0x1'",
        "X402MW_CHAINS (item 1, confirmations) must be at least 1",
        "X402MW_CHAINS (item 2, colour) is not a setting",
    ]


def test_the_documentation_names_every_setting_and_option() -> None:
    text = (Path(__file__).parents[2] / "docs" / "platform.md").read_text()
    table = text[text.index("## Settings") : text.index("## Chains")]
    for name, info in PlatformSettings.model_fields.items():
        assert f"`{env_variable(name)}`" in table, name
        option = option_of(info)
        assert option is None or f"`{option.flag}" in table, name
