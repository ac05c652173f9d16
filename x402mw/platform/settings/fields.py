"""The pieces settings are made of: the `Option` a field may carry, the names of the environment
variables, and the checked types of keys, URLs, addresses, ports and token lists."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BeforeValidator, Field, SecretStr
from pydantic.fields import FieldInfo

ENV_PREFIX = "X402MW_"


@dataclass(frozen=True)
class Option:
    """A setting's command-line option, as ``Annotated`` metadata of its field. ``flag`` is ``--name``
    (a true/false setting gets ``--name/--no-name``); ``metavar`` names the value in ``--help``;
    ``multiple`` lets the option be repeated; ``default`` says in ``--help`` what leaving it out
    means, where the field's default does not say it."""

    flag: str
    metavar: str | None = None
    multiple: bool = False
    default: str | None = None


def option_of(field: FieldInfo) -> Option | None:
    """The command-line `Option` of a field, if it has one."""
    return next((item for item in field.metadata if isinstance(item, Option)), None)


def env_variable(name: str) -> str:
    """The environment variable of the setting ``name``: ``port`` is ``X402MW_PORT``."""
    return ENV_PREFIX + name.upper()


def default_checkout_url_base(base_url: str) -> str:
    """The origin of ``base_url`` + ``/checkout``: ``http://127.0.0.1:4402/v1`` gives
    ``http://127.0.0.1:4402/checkout``."""
    url = urlsplit(base_url)
    return f"{url.scheme}://{url.netloc}/checkout"


def shown_url(url: SecretStr) -> str:
    """What a message may show of a secret URL: its scheme, host and port (``https://node.example``),
    never credentials, path or query, which may hold an API key."""
    try:
        parts = urlsplit(url.get_secret_value())
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "a URL"
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}{port}"


def _check_key(value: SecretStr) -> SecretStr:
    if not re.fullmatch(r"(0x)?[0-9a-fA-F]{64}", value.get_secret_value().strip()):
        raise ValueError("must be 32 bytes of hex (64 hex digits, 0x optional)")
    return value


def _is_http_url(value: str) -> bool:
    try:
        parts = urlsplit(value)
        _ = parts.port  # a port that is not a number from 0 to 65535 raises ValueError
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname) and not re.search(r"\s", value)


def _check_http_url(value: str) -> str:
    if not _is_http_url(value):
        raise ValueError(f"must be an http(s) URL with a host, not {value!r}")
    return value


def _check_url_base(value: str) -> str:
    return value and _check_http_url(value)  # empty: derived from another setting


def _check_secret_http_url(value: SecretStr) -> SecretStr:
    if not _is_http_url(value.get_secret_value()):
        raise ValueError("must be an http(s) URL with a host")
    return value


def _check_database_url(value: SecretStr) -> SecretStr:
    if not re.match(r"(sqlite|postgresql)(\+\w+)?://", value.get_secret_value()):
        raise ValueError("must be sqlite:///path or postgresql://user@host/db")
    return value


def _check_address(value: str) -> str:
    if not re.fullmatch(r"0x[0-9a-fA-F]{40}", value):
        raise ValueError(f"must be an address (0x and 40 hex digits), not {value!r}")
    return value


def _comma_separated(value: Any) -> Any:
    """``"a, b"`` and ``["a,b", "c"]`` (the environment, repeated options) are ``["a", "b", "c"]``."""
    if isinstance(value, str):
        value = [value]
    if isinstance(value, list | tuple):
        return [part.strip() for item in value for part in str(item).split(",") if part.strip()]
    return value


def _token_pairs(value: Any) -> Any:
    """``"USDC=0x.. EURC=0x.."`` and ``["USDC=0x..", ...]`` are ``{"USDC": "0x..", ...}``."""
    if isinstance(value, str):
        value = [value]
    if isinstance(value, list | tuple):
        pairs = [part for item in value for part in str(item).split()]
        bad = [pair for pair in pairs if not re.fullmatch(r"[^=]+=[^=]+", pair)]
        if bad:
            raise ValueError(f"must be SYMBOL=ADDRESS, not {', '.join(map(repr, bad))}")
        value = dict(pair.split("=") for pair in pairs)
    if isinstance(value, dict):
        return {str(symbol).upper(): address for symbol, address in value.items()}
    return value


def _lowercase(value: Any) -> Any:
    return value.strip().lower() if isinstance(value, str) else value


CommaSeparated = BeforeValidator(_comma_separated)  # metadata of a list read from one variable
PrivateKey = Annotated[SecretStr, AfterValidator(_check_key)]
DatabaseUrl = Annotated[SecretStr, AfterValidator(_check_database_url)]
RpcUrl = Annotated[SecretStr, AfterValidator(_check_secret_http_url)]
HttpUrl = Annotated[str, AfterValidator(_check_http_url)]
UrlBase = Annotated[str, AfterValidator(_check_url_base)]
Address = Annotated[str, AfterValidator(_check_address)]
Tokens = Annotated[dict[str, Address], BeforeValidator(_token_pairs)]
Confirmations = Annotated[int, Field(ge=1)]
Port = Annotated[int, Field(ge=0, le=65535)]
LogLevel = Annotated[Literal["critical", "error", "warning", "info", "debug", "trace"], BeforeValidator(_lowercase)]
LogFormat = Annotated[Literal["text", "json"], BeforeValidator(_lowercase)]
