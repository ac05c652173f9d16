"""The request bodies of the public checkout endpoints (`x402mw.platform.checkout`): defined at the
API's level, with the fields they share with the merchant API, so that the OpenAPI document
(`x402mw.platform.openapi.document`) describes them without importing the checkout, which is built on
the API's plumbing."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from x402mw.platform.http.fields import Address

__all__ = ["UINT_PATTERN", "AttemptBody", "AuthorizationBody", "PrepareBody", "SyncBody", "WalletAuthorization"]


class AttemptBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    network: str = Field(max_length=64)
    currency: Literal["USDC", "USDT", "EURC"]
    method: Literal["transfer", "wallet"]


class SyncBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    txHash: str = Field(pattern=r"^0x[0-9a-fA-F]{64}$")
    network: str = Field(max_length=64)


class PrepareBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    network: str | None = Field(default=None, max_length=64)
    currency: Literal["USDC", "USDT", "EURC"] | None = None


UINT_PATTERN = r"^(?:0|[1-9][0-9]{0,17})$"
"""What the document promises for a uint256 field (below 10**18: values and Unix times); larger ones
up to 2**256 - 1 are read too."""


def _uint(value: object) -> str:
    """A uint256 as the typed data has it: a decimal string, or a JSON integer."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**256:
        return str(value)
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 77 and int(value) < 2**256:
        return str(int(value))
    raise ValueError("must be an unsigned integer, as a decimal string")


Uint = Annotated[
    str,
    BeforeValidator(_uint),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "pattern": UINT_PATTERN},
                {"type": "integer", "minimum": 0, "maximum": 10**18 - 1},
            ]
        },
    ),
]


class WalletAuthorization(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    from_: Address = Field(alias="from")
    to: Address
    value: Uint
    validAfter: Uint
    validBefore: Uint
    nonce: str = Field(pattern=r"^0x[0-9a-fA-F]{64}$")


class AuthorizationBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    network: str = Field(max_length=64)
    currency: Literal["USDC", "USDT", "EURC"]
    authorization: WalletAuthorization
    # A key's 65 bytes, or a smart account's (EIP-1271; ERC-6492 for a wallet not deployed yet).
    signature: str = Field(pattern=r"^0x(?:[0-9a-fA-F]{2}){65,4096}$")
