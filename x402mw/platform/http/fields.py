"""The kinds of value the API takes, each with its check and the JSON schema that the OpenAPI
document publishes for it, written once here so that the two cannot disagree: what the document
calls valid is accepted, what it calls invalid is refused (400, or 404 for an id in a path).

- ids: lower- or upper-case hyphenated UUIDs (`UUID_PATTERN`); challenge ids are the seller's own;
- EVM addresses (`Address`): ``0x`` and 40 hex digits, all lower or all upper case as the document
  says; a mixed-case address is accepted too when its EIP-55 checksum is right, which no pattern
  can say;
- URLs (`HttpUrl`): absolute http(s) URLs with a host, as the pattern spells them;
- amounts (`amount_schema`): `x402mw.protocol.prices.AmountFormat`'s pattern, or a JSON number;
- names: no control character (`NAME_PATTERN`);
- text: no string in a request may hold a NUL character (`NO_NUL`; PostgreSQL text cannot);
  `x402mw.platform.openapi.schemas` adds that rule to every string the models leave free.
"""

from __future__ import annotations

import ipaddress
import re
import string
from typing import Annotated, Any

from pydantic import AfterValidator, WithJsonSchema

from x402mw.evm.keys import is_address, to_checksum_address
from x402mw.platform.emails.addresses import ADDR_SPEC_PATTERN, MAX_ADDRESS, is_addr_spec
from x402mw.protocol.prices import AmountFormat

NO_NUL = r"^[^\x00]*$"
"""The pattern of free text: anything but NUL."""

NAME_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]*$"
"""The pattern of every name the API takes (an endpoint's, a link's, a plan's, a customer's): any
text but control characters (C0, DEL, C1; no line break nor tab), as a name is shown on one line
(dashboards, emails, the checkout page). Give it as the field's ``pattern``: pydantic enforces it
and the OpenAPI document publishes it."""

UUID_PATTERN = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
"""A hyphenated UUID in either case: the form of every id the platform makes."""
_UUID = re.compile(UUID_PATTERN)

ADDRESS_PATTERN = r"^0[xX](?:[0-9a-f]{40}|[0-9A-F]{40})$"
"""An EVM address as the document states it (checksummed mixed case is accepted besides)."""

# RFC 3986's characters, spelled out (a pattern's \w or \s means different things to different
# regex engines): a URI is ASCII; anything else in it is percent-encoded (a host, in punycode).
_UNRESERVED_SUB = r"A-Za-z0-9\-._~!$&'()*+,;="
_PCT = r"%[0-9A-Fa-f]{2}"
_USERINFO = rf"(?:[{_UNRESERVED_SUB}:]|{_PCT})*@"
_HOST = rf"(?:(?:[{_UNRESERVED_SUB}]|{_PCT})+|\[[0-9A-Fa-f:.]+\])"
_PORT = r"(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4})"
_PCHARS = rf"(?:[{_UNRESERVED_SUB}:@/?]|{_PCT})*"
URL_PATTERN = (
    rf"^[Hh][Tt][Tt][Pp][Ss]?://(?:{_USERINFO})?{_HOST}(?::{_PORT})?(?:/{_PCHARS})?(?:\?{_PCHARS})?(?:#{_PCHARS})?$"
)
"""An absolute http(s) URL, a URI as RFC 3986 spells it (the OpenAPI document's ``format: uri``):
optional user info, a host (a name, or an IPv6 address in brackets), an optional port (0-65535),
then a path, query and fragment; ASCII only, anything else percent-encoded (``%C3%A9``), a
host name in punycode; no white space, backslash or control character anywhere."""
_URL = re.compile(URL_PATTERN)
_URL_HOST = re.compile(rf"[^:]+://(?:{_USERINFO})?({_HOST})")
MAX_URL = 2048


def is_uuid(value: str) -> bool:
    """Whether ``value`` is a hyphenated UUID (either case), as `UUID_PATTERN` says."""
    return _UUID.fullmatch(value) is not None


def http_url(value: str | None) -> str | None:
    """A pydantic field check: an absolute http(s) URL of at most 2048 characters, as `URL_PATTERN`
    spells it (a bracketed host must be an IPv6 address)."""
    if value is None:
        return None
    found = _URL.fullmatch(value) if len(value) <= MAX_URL else None
    host = found and _URL_HOST.match(value)
    if not host or (host.group(1).startswith("[") and not _ipv6(host.group(1)[1:-1])):
        raise ValueError("must be an absolute http(s) URL of at most 2048 characters")
    return value


MCP_TOOL_PATTERN = r"^mcp://tool/[A-Za-z0-9_.-]{1,128}$"
"""The resource URL of an MCP tool sold per call (the x402 MCP transport's ``mcp://tool/<name>``;
MCP tool names are 1 to 128 letters, digits, ``_``, ``-`` and ``.``)."""
_MCP_TOOL = re.compile(MCP_TOOL_PATTERN)


def resource_url(value: str | None) -> str | None:
    """A pydantic field check: what an agent endpoint sells, an absolute http(s) URL (`http_url`) or
    an MCP tool's ``mcp://tool/<name>``."""
    if value is None or _MCP_TOOL.fullmatch(value):
        return value
    try:
        return http_url(value)
    except ValueError:
        raise ValueError(
            "must be an absolute http(s) URL of at most 2048 characters, or mcp://tool/<name> for an MCP tool"
        ) from None


ResourceUrl = Annotated[
    str,
    WithJsonSchema(
        {
            "type": "string",
            "format": "uri",
            "pattern": f"^(?:{URL_PATTERN[1:-1]}|{MCP_TOOL_PATTERN[1:-1]})$",
            "maxLength": MAX_URL,
        }
    ),
]
"""The type of an agent endpoint's ``resourceUrl`` (its validator is :func:`resource_url`)."""


def _ipv6(text: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(text), ipaddress.IPv6Address)
    except ValueError:
        return False


HttpUrl = Annotated[
    str,
    WithJsonSchema({"type": "string", "format": "uri", "pattern": URL_PATTERN, "maxLength": MAX_URL}),
]
"""The type of a URL field: what :func:`http_url` accepts, as the OpenAPI document describes it
(the field's validator is still :func:`http_url`). The pattern cannot say that a bracketed host
must be a valid IPv6 address; the description of the field does."""


def checksum_address(value: str) -> str:
    """A pydantic field check: an EVM address (see `ADDRESS_PATTERN`), answered in EIP-55 form."""
    if not is_address(value):
        raise ValueError("must be a 0x-prefixed 20-byte EVM address")
    return to_checksum_address(value)


Address = Annotated[
    str,
    AfterValidator(checksum_address),
    WithJsonSchema({"type": "string", "pattern": ADDRESS_PATTERN, "description": "EVM address"}),
]
"""An EVM address field, stored and answered in EIP-55 checksum form."""


def _not_zero(value: str) -> str:
    if int(value, 16) == 0:
        raise ValueError("must not be the zero address")
    return value


NonZeroAddress = Annotated[
    str,
    AfterValidator(checksum_address),
    AfterValidator(_not_zero),
    WithJsonSchema(
        {"type": "string", "pattern": ADDRESS_PATTERN, "not": {"pattern": "^0[xX]0{40}$"}, "description": "EVM address"}
    ),
]
"""An EVM address other than the zero address (which no transfer can reach), in EIP-55 form."""


def amount_schema(amounts: AmountFormat) -> dict[str, Any]:
    """The JSON schema of an amount field: a string of `AmountFormat.pattern`, or a JSON number
    (read by its value: positive, at most the maximum, a multiple of the smallest unit)."""
    return {
        "anyOf": [
            {"type": "string", "pattern": amounts.pattern()},
            {
                "type": "number",
                "exclusiveMinimum": 0,
                "maximum": amounts.maximum,
                "multipleOf": float(f"1e-{amounts.decimals}"),
            },
        ]
    }


MAX_MINOR = 10**18 - 1
MINOR_PATTERN = r"^[1-9][0-9]{0,17}$"
"""Minor units as text: a positive integer below 10**18, without leading zeros."""
_MINOR = re.compile(MINOR_PATTERN)


def minor_units(value: object) -> int | None:
    """A pydantic ``mode="before"`` check: a positive integer of minor units below 10**18, as a
    string of `MINOR_PATTERN` or a JSON integer (``None`` passes, for optional fields)."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_MINOR:
        return value
    if isinstance(value, str) and _MINOR.fullmatch(value):
        return int(value)
    raise ValueError(f'must be a string of integer minor units from 1 to {MAX_MINOR}, e.g. "10000"')


MINOR_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"type": "string", "pattern": MINOR_PATTERN},
        {"type": "integer", "minimum": 1, "maximum": MAX_MINOR},
    ]
}
"""The JSON schema of what `minor_units` accepts."""

EMAIL_PATTERN = ADDR_SPEC_PATTERN
"""One email address, ``local@domain``: the dot-atom form of an RFC 5322 addr-spec, with a host name
for domain (`x402mw.platform.emails.addresses`); never a list, a group or a display name."""
MAX_EMAIL = MAX_ADDRESS


def _email(value: str) -> str:
    if not is_addr_spec(value):
        raise ValueError("must be one email address (local@domain.example), without a name, list or group")
    return value


Email = Annotated[
    str,
    AfterValidator(_email),
    WithJsonSchema({"type": "string", "pattern": EMAIL_PATTERN, "maxLength": MAX_EMAIL}),
]
"""An email field: `EMAIL_PATTERN`, at most 320 characters."""


def _char_class(chars: set[str]) -> str:
    """``chars`` as a regex character class, runs of three or more consecutive characters as ranges."""
    runs: list[list[str]] = []
    for char in sorted(chars):
        if runs and ord(char) == ord(runs[-1][-1]) + 1:
            runs[-1].append(char)
        else:
            runs.append([char])
    spelled = (
        f"{re.escape(run[0])}-{re.escape(run[-1])}" if len(run) > 2 else "".join(map(re.escape, run)) for run in runs
    )
    return "[" + "".join(spelled) + "]"


def _all_but(word: str, letters: set[str]) -> str:
    """A pattern of the words of ``len(word)`` characters of ``letters`` other than ``word`` (its
    first character that differs, and any after it), without a look-ahead."""
    every = _char_class(letters)
    options = []
    for at, char in enumerate(word):
        rest = len(word) - at - 1
        options.append(re.escape(word[:at]) + _char_class(letters - {char}) + (f"{every}{{{rest}}}" if rest else ""))
    return "|".join(options)


_ID_LETTERS = {*string.ascii_letters, *string.digits, "_", "-"}
_ID_CLASS = _char_class(_ID_LETTERS)
CHALLENGE_ID_PATTERN = f"^(?:{_ID_CLASS}{{1,4}}|{_ID_CLASS}{{6,64}}|{_all_but('batch', _ID_LETTERS)})$"
"""A challenge id, as the seller middleware makes them: 1-64 letters, digits, ``_`` or ``-``, but
not ``batch``, which names the batch operation in ``/v1/agent/challenges/batch``."""
_CHALLENGE_ID = re.compile(CHALLENGE_ID_PATTERN)
CHALLENGE_ID_SCHEMA: dict[str, Any] = {"type": "string", "pattern": CHALLENGE_ID_PATTERN}


def _challenge_id(value: str) -> str:
    if not _CHALLENGE_ID.fullmatch(value):
        raise ValueError("must be 1-64 letters, digits, '_' or '-' (and not 'batch')")
    return value


ChallengeId = Annotated[str, AfterValidator(_challenge_id), WithJsonSchema(CHALLENGE_ID_SCHEMA)]
"""A challenge id field: `CHALLENGE_ID_PATTERN`, and not ``batch``."""


def _uuid(value: str) -> str:
    if not is_uuid(value):
        raise ValueError("must be an id: a hyphenated UUID")
    return value.lower()


Uuid = Annotated[str, AfterValidator(_uuid), WithJsonSchema({"type": "string", "pattern": UUID_PATTERN})]
"""An id field: a hyphenated UUID (`UUID_PATTERN`; every id the platform makes is one), read in lower case."""
