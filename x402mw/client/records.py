"""The payments a seller accepted, as the paying auth records them (`PaymentRecord`), and the check
of the platform's signed receipt against the payment it names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal

from x402mw.client.channels import ChannelCharge
from x402mw.client.spending import DEFAULT_DECIMALS, EXACT
from x402mw.evm.receipts import verify_receipt
from x402mw.protocol.models import PaymentRequirements

INVALID_RECEIPT = "invalid_receipt"


@dataclass(frozen=True, slots=True)
class PaymentRecord:
    """One payment a seller accepted. ``amount`` is in atomic units of ``asset``; ``units`` in tokens.
    For an ``upto`` payment (a metered route), ``amount`` is what the seller charged and ``ceiling``
    the most the agent signed for; so for a ``batch-settlement`` payment (by channel), whose
    ``channel`` says the deposit it made, if any, and the channel's balance and charges after it.

    ``verified`` is True only when the auth has a ``receipt_signer`` and the receipt was signed by it
    and names this payment (network, asset, amount, payer, payTo, transaction as far as it states them).
    """

    url: str
    amount: int
    asset: str
    network: str
    pay_to: str
    transaction: str
    payer: str
    receipt: Mapping[str, str] | None
    verified: bool
    symbol: str | None = None
    decimals: int = DEFAULT_DECIMALS
    scheme: str = "exact"
    ceiling: int | None = None  # upto: the most that was signed for; ``amount`` is what was charged
    channel: ChannelCharge | None = None  # batch-settlement: the channel paid from, after this charge

    @property
    def units(self) -> Decimal:
        return Decimal(self.amount).scaleb(-self.decimals, context=EXACT)


def receipt_matches(
    receipt: Mapping[str, str],
    signer: str,
    accepted: PaymentRequirements,
    payer: str,
    transaction: str,
    amount: int,
) -> bool:
    if not verify_receipt(receipt, signer):
        return False
    expected = {
        "network": accepted.network,
        "asset": accepted.asset,
        "amount": str(amount),
        "payer": payer,
        "payTo": accepted.pay_to,
        "transaction": transaction,
    }
    if accepted.scheme == "upto":
        expected["maxAmount"] = str(accepted.amount)
    challenge = accepted.extra.get("challengeId")
    if isinstance(challenge, str):
        expected["challengeId"] = challenge
    return all(
        name not in receipt or not value or receipt[name].lower() == value.lower() for name, value in expected.items()
    )
