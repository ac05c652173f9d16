"""What a paid route is, and the endpoint terms the platform holds for it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from x402mw.errors import ConfigurationError, PriceError
from x402mw.seller.decisions import AmountCallback
from x402mw.seller.discovery import Discovery
from x402mw.seller.origins import public_origin
from x402mw.seller.paywall import Paywall
from x402mw.seller.sign_in import SignIn

ReleasePolicy = Literal["included", "confirmed"]


@dataclass(frozen=True, slots=True)
class PaidRoute:
    """A route sold per request.

    ``endpoint`` is the id of the agent endpoint created with ``POST /agent/endpoints``. For an
    endpoint with ``pricingMode: metered`` the handler reports what each request used
    (`x402mw.seller.metering.MeteredPayment`) and ``amount`` is not used. For an
    endpoint with ``pricingMode: dynamic``, ``amount`` is called with the framework's request (sync
    or async) for each request, the paid retry too, and returns the price (``"$0.02"``, ``"0.02 USDC"``,
    a `Decimal` or an ``int`` of atomic units); a payment whose terms are below it is refused.

    ``discovery`` declares what the route takes and gives (its 402's ``bazaar`` extension, the
    seller's ``/.well-known/x402`` and, for a ``discoverable`` endpoint, the platform's catalogue).
    ``sign_in`` lets a wallet that paid for the route back in (sign-in-with-x).
    """

    endpoint: str
    amount: AmountCallback | None = None
    description: str | None = None
    mime_type: str | None = None
    discovery: Discovery | None = None
    sign_in: SignIn | None = None

    def __post_init__(self) -> None:
        problems = []
        if not isinstance(self.endpoint, str) or not self.endpoint.strip():
            problems.append("PaidRoute.endpoint must be the id of an agent endpoint")
        if self.amount is not None and not callable(self.amount):
            problems.append("PaidRoute.amount must be a callable taking the request")
        if self.discovery is not None and not isinstance(self.discovery, Discovery):
            problems.append("PaidRoute.discovery must be a Discovery")
        if self.sign_in is not None and not isinstance(self.sign_in, SignIn):
            problems.append("PaidRoute.sign_in must be a SignIn")
        if problems:
            raise ConfigurationError(problems)


@dataclass(frozen=True, slots=True)
class ChannelOffer:
    """The payment channels (``batch-settlement``) an endpoint offers: the merchant's receiver
    authorizer, the channels' withdraw delay, the least first deposit, and whether they are offered
    alone."""

    receiver_authorizer: str
    withdraw_delay: int
    min_deposit: int | None
    only: bool

    @classmethod
    def from_api(cls, data: Any) -> ChannelOffer | None:
        if data is None:
            return None
        minimum = data.get("minDepositMinor")
        return cls(
            receiver_authorizer=str(data["receiverAuthorizer"]),
            withdraw_delay=int(data["withdrawDelaySeconds"]),
            min_deposit=int(minimum) if minimum is not None else None,
            only=bool(data.get("only", False)),
        )


@dataclass(frozen=True, slots=True)
class EndpointTerms:
    """An agent endpoint as the platform describes it: the terms a challenge offers."""

    id: str
    network: str
    asset: str
    currency: str
    decimals: int
    eip712_name: str
    eip712_version: str
    pay_to: str
    pricing_mode: Literal["fixed", "dynamic", "metered"]
    amount: int | None  # metered: the ceiling one request may be charged
    release_policy: ReleasePolicy
    max_timeout_seconds: int
    resource_url: str
    name: str
    facilitator_address: str | None = None  # metered: who alone may settle what agents sign
    channel: ChannelOffer | None = None  # payment channels offered, beside the scheme above or alone

    @classmethod
    def from_api(cls, data: dict[str, Any]) -> EndpointTerms:
        """Build from the platform's ``endpoint`` object; `PriceError` if it is unusable."""
        try:
            pricing = data.get("pricingMode")
            amount = data.get("maxAmountMinor") if pricing == "metered" else data.get("amountMinor")
            if pricing == "metered" and (amount is None or not data.get("facilitatorAddress")):
                raise ValueError("a metered endpoint needs maxAmountMinor and facilitatorAddress")
            return cls(
                id=str(data["id"]),
                network=str(data["network"]),
                asset=str(data["asset"]),
                currency=str(data["currency"]),
                decimals=int(data["decimals"]),
                eip712_name=str(data["assetName"]),
                eip712_version=str(data["assetVersion"]),
                pay_to=str(data["payoutAddress"]),
                pricing_mode=pricing if pricing in ("dynamic", "metered") else "fixed",
                amount=int(amount) if amount is not None else None,
                release_policy="confirmed" if data.get("releasePolicy") == "confirmed" else "included",
                max_timeout_seconds=int(data.get("maxTimeoutSeconds", 300)),
                resource_url=str(data.get("resourceUrl", "")),
                name=str(data.get("name", "")),
                facilitator_address=data.get("facilitatorAddress"),
                channel=ChannelOffer.from_api(data.get("channel")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise PriceError(f"the platform's endpoint description is unusable: {exc}") from None


def priced_per_request(route: PaidRoute, terms: EndpointTerms) -> bool:
    """Whether the route's amount callback prices each request (dynamic pricing), rather than the
    endpoint's fixed amount (or a metered endpoint's ceiling)."""
    if terms.pricing_mode == "metered":
        return False
    return terms.pricing_mode == "dynamic" or route.amount is not None


def check_gate_options(
    api_key: object, platform_url: object, settle_timeout: object, paywall: object, origin: str | None
) -> str | None:
    """`PaymentGate`'s options checked, every problem in one `ConfigurationError`; the seller's
    public origin, normalised (`public_origin`)."""
    problems = []
    if not isinstance(api_key, str) or not api_key.startswith(("sk_test_", "sk_live_")):
        problems.append("api_key must be a merchant API key (sk_test_... or sk_live_...)")
    if not isinstance(platform_url, str) or not platform_url.startswith(("http://", "https://")):
        problems.append("platform_url must be an http(s) URL such as https://pay.example.com/v1")
    if isinstance(settle_timeout, bool) or not isinstance(settle_timeout, int | float) or settle_timeout <= 0:
        problems.append("settle_timeout must be positive")
    if paywall is not None and not isinstance(paywall, Paywall):
        problems.append("paywall must be a Paywall")
    if origin is not None:
        origin = public_origin(origin)
        if origin is None:
            problems.append("origin must be the seller's public origin, such as https://api.example.com")
    if problems:
        raise ConfigurationError(problems)
    return origin
