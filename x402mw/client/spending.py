"""What a paying auth is allowed to spend: its caps and allow-lists parsed, and each offer of a 402
judged against them (`judge`): the first it can pay, in token units, is its `Choice`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Context, Decimal

from x402mw.client.wallet import token_domain
from x402mw.errors import PaymentRefusedError, PriceError
from x402mw.evm.batch_settlement import MAX_WITHDRAW_DELAY, MIN_WITHDRAW_DELAY
from x402mw.evm.keys import is_address
from x402mw.protocol.models import PaymentRequirements
from x402mw.protocol.networks import get_network, parse_caip2
from x402mw.protocol.prices import format_amount, parse_decimal

BATCH_SETTLEMENT = "batch-settlement"
OVER_CAP = "over_cap"
NO_ACCEPTABLE_OPTION = "no_acceptable_option"
DEFAULT_DECIMALS = 6
EXACT = Context(prec=100)  # room for any uint256 amount: Decimal arithmetic below never rounds


@dataclass(frozen=True, slots=True)
class Choice:
    """An offer this auth can pay: its amount in token units, and the key it counts under in ``spent``."""

    requirements: PaymentRequirements
    symbol: str | None
    decimals: int
    units: Decimal
    spend_key: str


def judge(
    entry: PaymentRequirements,
    *,
    networks: frozenset[str] | None,
    assets: frozenset[str] | None,
    max_amount: Decimal | None,
    max_total: Decimal | None,
    spent: Mapping[str, Decimal],
    max_deposit: Decimal | None = None,
) -> tuple[Choice, str] | tuple[None, str]:
    """The choice of paying ``entry``, or why it cannot be paid: its scheme, network, asset or
    amount is not one this auth pays (``max_total`` counts what was ``spent`` already). A
    ``batch-settlement`` offer is paid only with a channel deposit cap (``max_deposit``)."""
    if entry.scheme == BATCH_SETTLEMENT and max_deposit is None:
        return None, "paying by channel is not enabled (X402Auth(channels=ChannelPolicy(max_deposit=...)))"
    if entry.scheme not in ("exact", "upto", BATCH_SETTLEMENT):
        return None, f"scheme {entry.scheme!r} is not supported"
    if entry.scheme == "upto" and not is_address(str(entry.extra.get("facilitatorAddress", ""))):
        return None, "an upto offer without extra.facilitatorAddress cannot be signed"
    try:
        chain_id = parse_caip2(entry.network)
    except ValueError:
        return None, f"network {entry.network!r} is not an EVM network"
    if networks is not None and entry.network not in networks:
        return None, "network not allowed"
    if not is_address(entry.pay_to):
        return None, f"payTo {entry.pay_to!r} is not an address"
    network = get_network(chain_id)
    known = network.asset_by_address(entry.asset) if network else None
    if known is not None and not known.eip3009 and entry.scheme == "exact":
        return None, f"{known.symbol} cannot be paid by signed authorization"
    if (
        assets is not None
        and entry.asset.lower() not in assets
        and (known is None or known.symbol.lower() not in assets)
    ):
        return None, "asset not allowed"
    try:
        token_domain(entry)
    except PaymentRefusedError as exc:
        return None, exc.message
    decimals = known.decimals if known else DEFAULT_DECIMALS
    symbol = known.symbol if known else None
    # the symbol an unknown chain's offer gives names the coin in messages and records only: caps
    # and allow-lists go by what this process knows (a seller could name any token "USDC")
    shown = symbol or offered_symbol(entry)
    units = Decimal(entry.amount).scaleb(-decimals, context=EXACT)
    if entry.scheme == BATCH_SETTLEMENT:
        assert max_deposit is not None
        problem = channel_problem(entry, int(max_deposit.scaleb(decimals, context=EXACT)))
        if problem:
            return None, problem
    if max_amount is not None and units > max_amount:
        return None, f"over the per-payment cap of {max_amount} {shown or 'tokens'}"
    key = symbol or entry.asset.lower()
    already = spent.get(key, Decimal(0))
    if max_total is not None and EXACT.add(already, units) > max_total:
        return None, (f"over the total cap of {max_total} {shown or 'tokens'} ({already.normalize():f} already signed)")
    return Choice(entry, shown, decimals, units, key), ""


def parse_cap(value: object, name: str, problems: list[str]) -> Decimal | None:
    if value is None:
        return None
    try:
        cap = parse_decimal(value, field=name)
    except PriceError as exc:
        problems.append(exc.message)
        return None
    if cap < 0:
        problems.append(f"{name} must not be negative")
    return cap


def parse_strings(values: Iterable[str], name: str, problems: list[str]) -> list[str]:
    if isinstance(values, str):
        problems.append(f"{name} must be a list of strings, not one string")
        return []
    found = list(values)
    if not all(isinstance(v, str) for v in found):
        problems.append(f"{name} must hold strings only")
        return []
    return found


def parse_networks(values: Iterable[str] | None, problems: list[str]) -> frozenset[str] | None:
    if values is None:
        return None
    result = set()
    for value in parse_strings(values, "networks", problems):
        known = get_network(value)
        if known is not None:
            result.add(known.caip2)
            continue
        try:
            result.add(f"eip155:{parse_caip2(value)}")
        except ValueError:
            problems.append(f"unknown network {value!r}: use a CAIP-2 id such as 'eip155:8453'")
    return frozenset(result)


def token_key(accepted: PaymentRequirements) -> tuple[str, str]:
    return accepted.network, accepted.asset.lower()


def offered_symbol(entry: PaymentRequirements) -> str | None:
    """The token's symbol as the offer names it (``extra.currency``, which x402mw sellers send) on a
    chain this process does not know the tokens of (the platform's dev chain): for messages and caps
    by symbol. A value that is not a short symbol is ignored."""
    offered = entry.extra.get("currency")
    if isinstance(offered, str) and 0 < len(offered) <= 11 and offered.isalnum() and offered.isascii():
        return offered.upper()
    return None


def describe_offer(entry: PaymentRequirements) -> str:
    network = get_network(entry.network)
    known = network.asset_by_address(entry.asset) if network else None
    amount = format_amount(entry.amount, known.decimals) if known else f"{entry.amount} atomic units"
    return f"{amount} {known.symbol if known else offered_symbol(entry) or entry.asset} on {entry.network}"


def channel_problem(entry: PaymentRequirements, max_deposit_atomic: int) -> str:
    """Why this agent cannot pay ``entry`` by channel, or ``""``."""
    extra = entry.extra
    authorizer = extra.get("receiverAuthorizer")
    delay = extra.get("withdrawDelay")
    if not isinstance(authorizer, str) or not is_address(authorizer) or int(authorizer, 16) == 0:
        return "a batch-settlement offer must name its extra.receiverAuthorizer"
    if type(delay) is not int or not MIN_WITHDRAW_DELAY <= delay <= MAX_WITHDRAW_DELAY:
        return "a batch-settlement offer's extra.withdrawDelay must be 900 to 2592000 seconds"
    if extra.get("assetTransferMethod", "eip3009") not in ("eip3009", "permit2"):
        return f"asset transfer method {extra.get('assetTransferMethod')!r} is not supported"
    if entry.amount > max_deposit_atomic:
        return "one request costs more than the channel deposit cap (max_deposit)"
    return ""
