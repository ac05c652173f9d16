"""The agent's side of payment channels (``batch-settlement``), no chain: what `ChannelBook` signs
passes the x402 Foundation SDK's own checks (its channel id, its voucher, EIP-3009 and Permit2
deposit verification); corrections are adopted only with this wallet's voucher proof; an answer
that does not add up is not believed; the caps; and `X402Auth`'s flow stepped by hand."""

from __future__ import annotations

import base64
import json
from decimal import Decimal
from typing import Any

import httpx
import pytest

from x402mw.client import Wallet, X402Auth
from x402mw.client.channels import ChannelBook, ChannelPolicy, ChannelState, RefundOrder
from x402mw.client.spending import judge
from x402mw.errors import ConfigurationError, PaymentRefusedError
from x402mw.evm.batch_settlement import ChannelDomain, voucher_digest
from x402mw.evm.eip712 import sign_digest
from x402mw.evm.keys import new_private_key
from x402mw.protocol import PaymentRequired, PaymentRequirements

KEY_HEX = "4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318"
USDC_BASE = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"
PAY_TO = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"
AUTHORIZER = "0x6D8C4AdaCf3Ef18347F459FC071c282B5d07EbB3"
URL = "https://seller.example/weather"
TX = "0x" + "ab" * 32


def channel_offer(amount: int = 1_000, **extra: Any) -> dict[str, Any]:
    return {
        "scheme": "batch-settlement",
        "network": "eip155:8453",
        "amount": str(amount),
        "asset": USDC_BASE,
        "payTo": PAY_TO,
        "maxTimeoutSeconds": 3600,
        "extra": {
            "name": "USD Coin",
            "version": "2",
            "receiverAuthorizer": AUTHORIZER,
            "withdrawDelay": 900,
            "minDeposit": "10000",
            **extra,
        },
    }


def requirements(**extra: Any) -> PaymentRequirements:
    return PaymentRequirements.model_validate(channel_offer(**extra))


class EoaChain:
    """What the SDK's signature checks read of a chain, for EOAs: no code anywhere."""

    def get_code(self, address: str) -> bytes:
        return b""


def sdk_requirements(entry: PaymentRequirements) -> Any:
    from x402.schemas import PaymentRequirements as SdkRequirements

    return SdkRequirements.model_validate(entry.to_wire())


@pytest.fixture
def wallet() -> Wallet:
    return Wallet(KEY_HEX)


@pytest.fixture
def book(wallet: Wallet) -> ChannelBook:
    return ChannelBook(wallet, ChannelPolicy(max_deposit="1"))


def test_a_deposit_passes_the_sdk_facilitator_checks(book: ChannelBook) -> None:
    from x402.mechanisms.evm.batch_settlement.facilitator.deposit_eip3009 import (
        verify_eip3009_deposit_authorization,
    )
    from x402.mechanisms.evm.batch_settlement.facilitator.utils import (
        validate_channel_config,
        verify_batch_settlement_voucher_typed_data,
    )
    from x402.mechanisms.evm.batch_settlement.types import DepositPayload

    entry = requirements()
    state = book.state_for(entry)
    pending = book.sign(entry, None, 6, state)
    assert pending.kind == "deposit" and pending.deposit == 10_000  # the offer's minDeposit
    payload = DepositPayload.from_dict(pending.payload["payload"])
    assert payload.channel_config is not None and payload.voucher is not None and payload.deposit is not None
    assert validate_channel_config(payload.channel_config, state.id, sdk_requirements(entry)) is None
    assert payload.voucher.channel_id == state.id and payload.voucher.max_claimable_amount == "1000"
    assert verify_batch_settlement_voucher_typed_data(
        EoaChain(),  # type: ignore[arg-type]
        state.id,
        "1000",
        payload.channel_config.payer_authorizer,
        book.wallet.address,
        payload.voucher.signature,
        8453,
    )
    found = verify_eip3009_deposit_authorization(EoaChain(), payload, sdk_requirements(entry), 8453)  # type: ignore[arg-type]
    assert found == (None, None)
    assert pending.payload["accepted"] == entry.to_wire()


def test_a_permit2_deposit_passes_the_sdk_typed_data_check(book: ChannelBook) -> None:
    from x402.mechanisms.evm.batch_settlement.facilitator.deposit_permit2 import _verify_permit2_typed_data
    from x402.mechanisms.evm.batch_settlement.types import DepositPayload

    entry = requirements(assetTransferMethod="permit2")
    pending = book.sign(entry, None, 6, book.state_for(entry))
    payload = DepositPayload.from_dict(pending.payload["payload"])
    assert payload.deposit is not None and payload.deposit.authorization.permit2_authorization is not None
    assert _verify_permit2_typed_data(EoaChain(), payload, sdk_requirements(entry), 8453) is None  # type: ignore[arg-type]


def test_vouchers_are_cumulative_and_a_refund_voucher_is_zero_charge(book: ChannelBook) -> None:
    from x402.mechanisms.evm.batch_settlement.facilitator.utils import verify_batch_settlement_voucher_typed_data
    from x402.mechanisms.evm.batch_settlement.types import RefundPayload, VoucherPayload

    entry = requirements()
    state = book.state_for(entry)
    state.balance, state.charged = 10_000, 3_700
    pending = book.sign(entry, None, 6, state)
    voucher = VoucherPayload.from_dict(pending.payload["payload"])
    assert pending.kind == "voucher" and voucher.voucher.max_claimable_amount == "4700"
    assert verify_batch_settlement_voucher_typed_data(
        EoaChain(),  # type: ignore[arg-type]
        state.id,
        "4700",
        voucher.channel_config.payer_authorizer,
        book.wallet.address,
        voucher.voucher.signature,
        8453,
    )
    refund = RefundPayload.from_dict(book.sign(entry, None, 6, state, RefundOrder(2_000)).payload["payload"])
    assert (refund.voucher.max_claimable_amount, refund.amount) == ("3700", "2000")
    # the channel cannot cover the next request: a top-up of the offer's minDeposit
    state.charged = 9_500
    top_up = book.sign(entry, None, 6, state)
    assert (top_up.kind, top_up.deposit, top_up.ceiling) == ("deposit", 10_000, 10_500)


def test_a_deposit_stays_within_the_cap(wallet: Wallet) -> None:
    book = ChannelBook(wallet, ChannelPolicy(max_deposit="0.005"))
    entry = requirements(minDeposit="1000000")
    assert book.sign(entry, None, 6, book.state_for(entry)).deposit == 5_000
    unannounced = requirements(minDeposit=None)
    assert (
        ChannelBook(wallet, ChannelPolicy(max_deposit="1"))
        .sign(unannounced, None, 6, ChannelBook(wallet, ChannelPolicy(max_deposit="1")).state_for(unannounced))
        .deposit
        == 10 * 1_000
    )  # ten requests' worth
    state = book.state_for(entry)
    state.balance, state.charged = 0, 4_500  # owing more than one deposit may hold
    with pytest.raises(PaymentRefusedError, match="deposit cap"):
        book.sign(entry, None, 6, state)


def corrective(state: ChannelState, charged: int, signature: str, balance: int = 10_000) -> PaymentRequired:
    extra = {
        "channelState": {
            "channelId": state.id,
            "balance": str(balance),
            "totalClaimed": "0",
            "withdrawRequestedAt": 0,
            "refundNonce": "0",
            "chargedCumulativeAmount": str(charged),
        },
        "voucherState": {"signedMaxClaimable": str(charged), "signature": signature},
    }
    return PaymentRequired.model_validate(
        {
            "x402Version": 2,
            "error": "invalid_batch_settlement_evm_cumulative_amount_mismatch",
            "accepts": [channel_offer(**extra)],
        }
    )


def test_a_correction_is_adopted_only_with_this_wallets_voucher(book: ChannelBook) -> None:
    entry = requirements()
    state = book.state_for(entry)
    digest = voucher_digest(ChannelDomain(8453), bytes.fromhex(state.id[2:]), 7_000)
    forged = "0x" + sign_digest(new_private_key(), digest).hex()
    assert not book.correct(state, corrective(state, 7_000, forged))
    assert (state.charged, state.balance) == (0, 0)
    assert not book.correct(state, corrective(state, 7_000, "0x1234"))
    ours = book.wallet.sign_voucher(ChannelDomain(8453), bytes.fromhex(state.id[2:]), 7_000)
    assert book.correct(state, corrective(state, 7_000, ours))
    assert (state.charged, state.balance) == (7_000, 10_000)


def test_an_answer_that_does_not_add_up_leaves_the_count_alone(book: ChannelBook) -> None:
    entry = requirements()
    state = book.state_for(entry)
    state.balance = 10_000
    for extra in (
        {"chargedAmount": "5000"},  # more than the price signed for
        {"chargedAmount": "700", "channelState": {"chargedCumulativeAmount": "9999"}},
    ):
        pending = book.sign(entry, None, 6, state)
        assert book.settled(pending, {"success": True, "transaction": "", "extra": extra})
        assert state.charged == 0 and pending.outcome is not None and pending.outcome.charged == 0
    pending = book.sign(entry, None, 6, state)
    book.settled(pending, {"success": True, "extra": {"chargedAmount": "700", "channelState": {}}})
    assert state.charged == 700
    assert not book.settled(book.sign(entry, None, 6, state), {"success": False})


def test_the_policy_and_the_caps() -> None:
    with pytest.raises(ConfigurationError, match="max_deposit"):
        ChannelPolicy(max_deposit=0.5)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="more than 0"):
        ChannelPolicy(max_deposit="0")
    with pytest.raises(ConfigurationError, match="salt"):
        ChannelPolicy(max_deposit="1", salt=b"short")
    with pytest.raises(ConfigurationError, match="ChannelPolicy"):
        X402Auth(Wallet(KEY_HEX), channels={"max_deposit": "1"})  # type: ignore[arg-type]
    entry = requirements()
    caps: dict[str, Any] = {"networks": None, "assets": None, "max_amount": None, "max_total": None, "spent": {}}
    assert judge(entry, **caps)[1].startswith("paying by channel is not enabled")
    assert judge(entry, **caps, max_deposit=Decimal("0.0001"))[1].startswith("one request costs more")
    assert judge(requirements(withdrawDelay=60), **caps, max_deposit=Decimal(1))[1].endswith("seconds")
    choice, problem = judge(entry, **caps, max_deposit=Decimal(1))
    assert problem == "" and choice is not None and choice.units == Decimal("0.001")


def header(data: dict[str, Any]) -> str:
    return base64.b64encode(json.dumps(data).encode()).decode()


def paid(request: httpx.Request, charged: str = "1000", transaction: str = "") -> httpx.Response:
    settlement = {
        "success": True,
        "transaction": transaction,
        "network": "eip155:8453",
        "amount": "10000" if transaction else "",
        "extra": {"chargedAmount": charged},
    }
    return httpx.Response(200, headers={"PAYMENT-RESPONSE": header(settlement)}, request=request)


def sent_payload(request: httpx.Request) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(base64.b64decode(request.headers["PAYMENT-SIGNATURE"]))
    return data


def test_the_flow_stepped_by_hand_deposits_once_then_sends_vouchers_with_the_request(wallet: Wallet) -> None:
    auth = X402Auth(wallet, max_amount="0.01", channels=ChannelPolicy(max_deposit="1"))
    offer = {"x402Version": 2, "resource": {"url": URL}, "accepts": [channel_offer()]}
    flow = auth.auth_flow(httpx.Request("GET", URL))
    request = next(flow)
    assert "PAYMENT-SIGNATURE" not in request.headers
    request = flow.send(httpx.Response(402, headers={"PAYMENT-REQUIRED": header(offer)}, request=request))
    assert sent_payload(request)["payload"]["type"] == "deposit"
    with pytest.raises(StopIteration):
        flow.send(paid(request, transaction=TX))
    for expected in ("2000", "2700"):
        flow = auth.auth_flow(httpx.Request("GET", URL))
        request = next(flow)  # the voucher goes with the first request: no 402 first
        payload = sent_payload(request)["payload"]
        assert (payload["type"], payload["voucher"]["maxClaimableAmount"]) == ("voucher", expected)
        with pytest.raises(StopIteration):
            flow.send(paid(request, charged="700" if expected == "2000" else "1000"))
    assert [p.amount for p in auth.payments] == [1_000, 700, 1_000]
    assert auth.payments[0].transaction == TX and auth.payments[0].channel is not None
    assert auth.spent == {"USDC": Decimal("0.0027")}
    last = auth.payments[-1].channel
    assert last is not None and (last.balance, last.charged_total) == (10_000, 2_700)


def test_channels_are_not_paid_unless_the_agent_enabled_them(wallet: Wallet) -> None:
    auth = X402Auth(wallet, max_amount="0.01")
    offer = {"x402Version": 2, "resource": {"url": URL}, "accepts": [channel_offer()]}
    flow = auth.auth_flow(httpx.Request("GET", URL))
    request = next(flow)
    with pytest.raises(PaymentRefusedError, match="paying by channel is not enabled"):
        flow.send(httpx.Response(402, headers={"PAYMENT-REQUIRED": header(offer)}, request=request))


def offer_response(request: httpx.Request, data: dict[str, Any] | None = None) -> httpx.Response:
    data = data or {"x402Version": 2, "resource": {"url": URL}, "accepts": [channel_offer()]}
    return httpx.Response(402, headers={"PAYMENT-REQUIRED": header(data)}, request=request)


def test_the_caps_count_what_was_charged_not_the_price(wallet: Wallet) -> None:
    auth = X402Auth(wallet, max_amount="0.01", max_total="0.0025", channels=ChannelPolicy(max_deposit="1"))
    for index in range(3):
        flow = auth.auth_flow(httpx.Request("GET", URL))
        request = next(flow)
        if index == 0:
            request = flow.send(offer_response(request))
        with pytest.raises(StopIteration):
            flow.send(paid(request, charged="700", transaction=TX if index == 0 else ""))
    assert auth.spent == {"USDC": Decimal("0.0021")}  # three prices would be 0.003, over the cap
    flow = auth.auth_flow(httpx.Request("GET", URL))
    with pytest.raises(PaymentRefusedError, match="total cap") as refused:
        next(flow)  # a fourth price would pass the cap: nothing is signed
    assert refused.value.reason == "over_cap"


def test_a_restarted_agent_stepped_by_hand_adopts_the_corrective_402(wallet: Wallet) -> None:
    auth = X402Auth(wallet, max_amount="0.01", channels=ChannelPolicy(max_deposit="1"))
    flow = auth.auth_flow(httpx.Request("GET", URL))
    request = flow.send(offer_response(next(flow)))
    sent = sent_payload(request)["payload"]
    assert sent["type"] == "deposit"  # knowing nothing, it pays as for a new channel
    state = auth.channels.get(sent["voucher"]["channelId"]) if auth.channels else None
    assert state is not None
    proof = wallet.sign_voucher(ChannelDomain(8453), bytes.fromhex(state.id[2:]), 5_000)
    correction = corrective(state, 5_000, proof).to_wire() | {"resource": {"url": URL}}
    request = flow.send(offer_response(request, correction))
    sent = sent_payload(request)["payload"]
    assert (sent["type"], sent["voucher"]["maxClaimableAmount"]) == ("voucher", "6000")
    assert "channelState" not in sent_payload(request)["accepted"]["extra"]  # the offer's terms, echoed
    with pytest.raises(StopIteration):
        flow.send(paid(request))
    last = auth.payments[-1].channel
    assert last is not None and (last.deposit, last.balance, last.charged_total) == (0, 10_000, 6_000)
    assert auth.spent == {"USDC": Decimal("0.001")}  # the request was counted once


def exact_offer(amount: int) -> dict[str, Any]:
    offer = channel_offer(amount)
    return offer | {"scheme": "exact", "extra": {"name": "USD Coin", "version": "2"}}


@pytest.mark.parametrize(
    ("prefer", "exact_amount", "paid_with"),
    [(True, 1_000, "deposit"), (False, 1_000, "exact"), (False, 50_000, "deposit")],
)
def test_which_offer_is_paid(wallet: Wallet, prefer: bool, exact_amount: int, paid_with: str) -> None:
    auth = X402Auth(wallet, max_amount="0.01", channels=ChannelPolicy(max_deposit="1", prefer=prefer))
    both = {"x402Version": 2, "resource": {"url": URL}, "accepts": [exact_offer(exact_amount), channel_offer()]}
    flow = auth.auth_flow(httpx.Request("GET", URL))
    request = flow.send(offer_response(next(flow), both))
    payload = sent_payload(request)
    assert payload["accepted"]["scheme"] == ("exact" if paid_with == "exact" else "batch-settlement")
    if paid_with != "exact":
        assert payload["payload"]["type"] == paid_with


def test_a_route_whose_terms_changed_is_paid_on_its_new_402_and_counted_once(wallet: Wallet) -> None:
    auth = X402Auth(wallet, max_amount="0.01", channels=ChannelPolicy(max_deposit="1"))
    flow = auth.auth_flow(httpx.Request("GET", URL))
    request = flow.send(offer_response(next(flow)))
    with pytest.raises(StopIteration):
        flow.send(paid(request, transaction=TX))
    flow = auth.auth_flow(httpx.Request("GET", URL))
    request = next(flow)  # the voucher at the old price goes with the request
    assert sent_payload(request)["payload"]["voucher"]["maxClaimableAmount"] == "2000"
    dearer = {"x402Version": 2, "resource": {"url": URL}, "accepts": [channel_offer(amount=3_000)]}
    request = flow.send(offer_response(request, dearer))
    assert sent_payload(request)["payload"]["voucher"]["maxClaimableAmount"] == "4000"
    with pytest.raises(StopIteration):
        flow.send(paid(request, charged="3000"))
    assert auth.spent == {"USDC": Decimal("0.004")}


def test_an_agent_restored_from_its_records_pays_on_with_a_voucher(wallet: Wallet) -> None:
    kept: list[Any] = []
    before = X402Auth(wallet, max_amount="0.01", channels=ChannelPolicy(max_deposit="1"), on_payment=kept.append)
    flow = before.auth_flow(httpx.Request("GET", URL))
    request = flow.send(offer_response(next(flow)))
    with pytest.raises(StopIteration):
        flow.send(paid(request, charged="800", transaction=TX))
    after = X402Auth(wallet, max_amount="0.01", channels=ChannelPolicy(max_deposit="1"))
    assert after.channels is not None
    after.channels.restore(record.channel for record in kept)
    flow = after.auth_flow(httpx.Request("GET", URL))
    request = flow.send(offer_response(next(flow)))
    payload = sent_payload(request)["payload"]
    assert (payload["type"], payload["voucher"]["maxClaimableAmount"]) == ("voucher", "1800")


def test_the_pay_command_refuses_a_bad_deposit_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from x402mw.client.pay import pay_command

    monkeypatch.setenv("X402MW_PRIVATE_KEY", KEY_HEX)
    result = CliRunner().invoke(pay_command, [URL, "--max-deposit", "ten", "--json"])
    assert result.exit_code == 1
    assert "max_deposit" in json.loads(result.output)["error"]["message"]
