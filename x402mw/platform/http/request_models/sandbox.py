"""The bodies of ``POST /sandbox/faucet`` and ``POST /sandbox/payment-intents/:id/simulate-payment``."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from x402mw.platform.http.fields import NonZeroAddress, amount_schema
from x402mw.platform.services.sandbox import FAUCET_AMOUNTS, Scenario


class FaucetBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    network: str = Field(max_length=64, description="a test network of this platform, e.g. `eip155:1337`")
    currency: Literal["USDC", "EURC"] = Field(description="coin to mint")
    address: NonZeroAddress = Field(description="EVM address receiving the coins")
    amount: Annotated[Any, WithJsonSchema(amount_schema(FAUCET_AMOUNTS))] = Field(
        description="decimal amount of coins, at most 1,000,000"
    )  # read by FAUCET_AMOUNTS


class SimulatePaymentBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    scenario: Scenario = Field(
        default="exact",
        description="`exact` (default), `underpaid` (half), `overpaid` (10 % more), `late` (the order is "
        "expired first) or `wrong_asset` (a coin the order does not accept)",
    )
    network: str | None = Field(
        default=None, max_length=64, description="a test network of this platform; default: the first one"
    )
