"""The request bodies of the public checkout endpoints (`x402mw.platform.checkout.api`), each field
described for the OpenAPI document (`x402mw.platform.openapi.document`) where it is declared."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from x402mw.platform.http.fields import Address

__all__ = ["UINT_PATTERN", "AttemptBody", "AuthorizationBody", "PrepareBody", "SyncBody", "WalletAuthorization"]


class AttemptBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    network: str = Field(max_length=64, description="`eip155:<chainId>`: one of the order's `networks`")
    currency: Literal["USDC", "USDT", "EURC"] = Field(
        description="one of the order's `acceptedCurrencies` that the network has"
    )
    method: Literal["transfer", "wallet"] = Field(
        description="`transfer` (send to the deposit address from anywhere) or `wallet` (a browser wallet "
        "pays); must be enabled in the order's `paymentMethods`"
    )


class SyncBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    txHash: str = Field(pattern=r"^0x[0-9a-fA-F]{64}$", description="the transaction the buyer's wallet sent")
    network: str = Field(max_length=64, description="`eip155:<chainId>` it was sent on: one of the order's `networks`")


class PrepareBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    network: str | None = Field(default=None, max_length=64, description="default: the first of the order's `networks`")
    currency: Literal["USDC", "USDT", "EURC"] | None = Field(
        default=None, description="default: the order's `currency`, else the first coin of that network"
    )


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
    from_: Address = Field(alias="from", description="the paying wallet (it needs the coin, no ETH)")
    to: Address = Field(description="the order's deposit address")
    value: Uint = Field(description="the amount due, in minor units")
    validAfter: Uint = Field(description="Unix time")
    validBefore: Uint = Field(description="Unix time; at least a few seconds ahead")
    nonce: str = Field(pattern=r"^0x[0-9a-fA-F]{64}$", description="32 bytes of hex")


class AuthorizationBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    network: str = Field(max_length=64, description="`eip155:<chainId>`: one of the order's `networks`")
    currency: Literal["USDC", "USDT", "EURC"] = Field(
        description="an EIP-3009 coin the order accepts (USDC, EURC; USDT has no authorization: 409 "
        "`gasless_unavailable`)"
    )
    authorization: WalletAuthorization = Field(
        description="the `TransferWithAuthorization` message the wallet signed: `attempts` (`method: wallet`) "
        "answers it in `authorization.message`, with `from` set to the wallet's account"
    )
    # A key's 65 bytes, or a smart account's (EIP-1271; ERC-6492 for a wallet not deployed yet).
    signature: str = Field(
        pattern=r"^0x(?:[0-9a-fA-F]{2}){65,4096}$",
        description="what `eth_signTypedData_v4` answered: a key's 65 bytes, or a smart account's signature "
        "(checked by the wallet with EIP-1271; ERC-6492-wrapped for a wallet not deployed yet)",
    )
