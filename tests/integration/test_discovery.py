"""Discovery (the x402 ``bazaar`` extension) and sign-in-with-x, on the real platform and dev chain.

A FastAPI seller declares its routes (derived from its own OpenAPI) and lets payers back in; our
``X402Auth`` pays; the Foundation SDK's bazaar client reads the platform's catalogue and the
402's declaration, and the SDK's sign-in-with-x client gets back into what it paid for."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from eth_account import Account
from eth_account.messages import encode_defunct
from fastapi import FastAPI, Request
from pydantic import BaseModel
from x402 import x402Client, x402ResourceServer
from x402.extensions.bazaar import (
    ListDiscoveryResourcesParams,
    OutputConfig,
    SearchDiscoveryResourcesParams,
    bazaar_resource_server_extension,
    declare_discovery_extension,
    with_bazaar,
)
from x402.extensions.bazaar.facilitator import validate_discovery_extension
from x402.extensions.bazaar.types import parse_discovery_extension
from x402.extensions.sign_in_with_x import create_siwx_payload, encode_siwx_header
from x402.http import FacilitatorConfig, HTTPFacilitatorClient, HTTPFacilitatorClientSync
from x402.http.clients.httpx import x402AsyncTransport
from x402.http.middleware.fastapi import PaymentMiddlewareASGI
from x402.http.types import PaymentOption, RouteConfig
from x402.mechanisms.evm.exact import ExactEvmScheme, ExactEvmServerScheme
from x402.mechanisms.evm.signers import EthAccountSigner

from tests.harness import Deployment, PlatformHarness
from tests.sellers import asgi_transport, lifespan
from x402mw.adapters.starlette import PaymentMiddleware, paid
from x402mw.client import X402Auth
from x402mw.errors import InvalidPaymentError
from x402mw.platform.services.catalogue import Catalogue
from x402mw.protocol.sign_in import SignInMessage, decode_sign_in, encode_sign_in
from x402mw.seller import Discovery, SignIn
from x402mw.seller.sign_in import NONCE_KEPT_AT_MOST, nonce_kept_until

pytestmark = pytest.mark.anyio
ORIGIN = "http://testserver"


class Forecast(BaseModel):
    city: str
    forecast: str


def seller(deployment: Deployment, other_endpoint: str, **options: Any) -> FastAPI:
    app = FastAPI()

    @app.get("/weather")
    @paid(deployment.endpoint_id, discovery=True, sign_in=SignIn(origin=ORIGIN, duration=3600))
    async def weather(request: Request, city: str = "Paris") -> Forecast:
        return Forecast(city=city, forecast="sunny" if not request.state.x402.signed_in else "sunny again")

    @app.post("/translate")
    @paid(
        other_endpoint,
        discovery=Discovery(body={"text": "hello"}, output={"text": "bonjour"}),
        sign_in=SignIn(origin=ORIGIN),
    )
    async def translate(request: Request) -> dict[str, str]:
        return {"text": "bonjour"}

    app.add_middleware(PaymentMiddleware, api_key=deployment.api_key, platform_url=deployment.harness.url, **options)
    return app


def second_endpoint(deployment: Deployment, *, discoverable: bool = False) -> str:
    with deployment.api() as api:
        reply = api.post(
            "/agent/endpoints",
            json={
                "name": "Translate",
                "resourceUrl": f"{ORIGIN}/translate",
                "chainId": deployment.harness.chain.chain_id,
                "currency": "USDC",
                "payoutAddress": deployment.payout,
                "amountMinor": "20000",
                "discoverable": discoverable,
            },
        )
        assert reply.status_code == 201, reply.text
        assert reply.json()["endpoint"]["discoverable"] is discoverable
        return str(reply.json()["endpoint"]["id"])


def make_discoverable(deployment: Deployment, value: bool = True) -> None:
    with deployment.api() as api:
        reply = api.patch(f"/agent/endpoints/{deployment.endpoint_id}", json={"discoverable": value})
        assert reply.status_code == 200, reply.text
        assert reply.json()["endpoint"]["discoverable"] is value


def bazaar(harness: PlatformHarness) -> Any:
    return with_bazaar(HTTPFacilitatorClientSync(FacilitatorConfig(url=harness.url + "/x402")))


def required_of(response: httpx.Response) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(base64.b64decode(response.headers["PAYMENT-REQUIRED"]))
    return decoded


async def test_the_catalogue_holds_only_opted_in_endpoints_and_the_sdk_reads_it(dev_platform: PlatformHarness) -> None:
    listed, hidden = dev_platform.deploy(), dev_platform.deploy()
    make_discoverable(listed)
    apps = [seller(d, second_endpoint(d)) for d in (listed, hidden)]
    for deployment, app in zip((listed, hidden), apps, strict=True):
        auth = X402Auth(deployment.agent, max_amount="0.05")
        async with httpx.AsyncClient(transport=asgi_transport(app), base_url=ORIGIN, auth=auth, timeout=60) as agent:
            paid_for = await agent.get("/weather", params={"city": "Oslo"})
            assert paid_for.status_code == 200, paid_for.text
            # the 402's declaration, read by the SDK: derived from the FastAPI route's OpenAPI
    async with httpx.AsyncClient(transport=asgi_transport(apps[0]), base_url=ORIGIN) as anonymous:
        unpaid = await anonymous.get("/weather")
    declared = parse_discovery_extension(required_of(unpaid)["extensions"]["bazaar"])
    assert validate_discovery_extension(declared).valid
    assert declared.info.input.method == "GET"
    schema = declared.schema_["properties"]["input"]["properties"]["queryParams"]
    assert schema["properties"]["city"]["type"] == "string"

    with bazaar(dev_platform) as client:
        page = await asyncio.to_thread(client.extensions.bazaar.list_resources, ListDiscoveryResourcesParams(limit=100))
        mine = [item for item in page.items if listed.payout.lower() in json.dumps(item.accepts).lower()]
        # the endpoint's own URL: the query (the payer's choice) is not listed
        assert [item.resource for item in mine] == [f"{ORIGIN}/weather"]
        assert mine[0].type == "http" and mine[0].x402_version == 2 and mine[0].description == "Weather"
        assert mine[0].accepts[0]["amount"] == "10000" and "seal" not in mine[0].accepts[0]["extra"]
        assert mine[0].extensions is not None and mine[0].extensions["bazaar"]["info"]["input"]["method"] == "GET"
        everything = json.dumps([item.to_dict() for item in page.items]).lower()
        assert hidden.payout.lower() not in everything  # the merchant that did not opt in is not listed
        assert page.pagination.total >= 1

        filtered = await asyncio.to_thread(
            client.extensions.bazaar.list_resources, ListDiscoveryResourcesParams(pay_to=listed.payout, type="http")
        )
        assert [item.resource for item in filtered.items] == [f"{ORIGIN}/weather"]
        found = await asyncio.to_thread(
            client.extensions.bazaar.search, SearchDiscoveryResourcesParams(query="weather", pay_to=listed.payout)
        )
        assert [item.resource for item in found.resources] == [f"{ORIGIN}/weather"]
        nothing = await asyncio.to_thread(
            client.extensions.bazaar.search, SearchDiscoveryResourcesParams(query="weather", pay_to=hidden.payout)
        )
        assert nothing.resources == []

        make_discoverable(listed, False)  # opting out takes the resources out at once
        after = await asyncio.to_thread(
            client.extensions.bazaar.list_resources, ListDiscoveryResourcesParams(pay_to=listed.payout)
        )
        assert after.items == [] and after.pagination.total == 0


@pytest.mark.parametrize(
    "query",
    [
        "limit=0",
        "limit=101",
        "limit=-1",
        "limit=1e3",
        "offset=-5",
        "offset=99999999999999999999",
        "type=ftp",
        "payTo=0x12",
        "network=%00",
        "scheme=" + "x" * 100,
        "extensions=a%20b",
        "unknown=1",
    ],
)
def test_absurd_catalogue_queries_are_refused(dev_platform: PlatformHarness, query: str) -> None:
    with httpx.Client(base_url=dev_platform.url) as client:
        reply = client.get("/x402/discovery/resources?" + query)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["code"] == "parameter_invalid"


@pytest.mark.parametrize("query", ["", "query=", "query=%20%20", "query=" + "w" * 201, "query=a%0Ab"])
def test_absurd_searches_are_refused(dev_platform: PlatformHarness, query: str) -> None:
    with httpx.Client(base_url=dev_platform.url) as client:
        reply = client.get("/x402/discovery/search?" + query)
    assert reply.status_code == 400, reply.text


def test_search_strings_are_words_not_patterns(dev_platform: PlatformHarness) -> None:
    with httpx.Client(base_url=dev_platform.url) as client:
        for words in ["%", "_", "\\", "' OR 1=1 --", "%%%%"]:
            reply = client.get("/x402/discovery/search", params={"query": words})
            assert reply.status_code == 200, reply.text
            assert reply.json()["resources"] == []


async def test_the_sdk_signs_in_where_it_paid_and_is_refused_where_it_did_not(deployment: Deployment) -> None:
    other = second_endpoint(deployment)
    app = seller(deployment, other)
    wallet = Account.from_key(deployment.agent_key)
    auth = X402Auth(deployment.agent, max_amount="0.05")
    async with httpx.AsyncClient(transport=asgi_transport(app), base_url=ORIGIN, timeout=60) as client:
        before = await client.get("/weather")
        assert before.status_code == 402
        refused = await sdk_sign_in(client, wallet, "GET", "/weather")  # not paid yet
        assert refused.status_code == 402
        assert required_of(refused)["error"] == "siwx_payment_not_found"
        paid_for = await client.get("/weather", auth=auth)
        assert paid_for.status_code == 200, paid_for.text
        back = await sdk_sign_in(client, wallet, "GET", "/weather")
        assert back.status_code == 200, back.text
        assert back.json() == {"city": "Paris", "forecast": "sunny again"}
        assert "PAYMENT-RESPONSE" not in back.headers  # nothing was paid for this one
        elsewhere = await sdk_sign_in(client, wallet, "POST", "/translate")  # paid for another endpoint
        assert elsewhere.status_code == 402
        assert required_of(elsewhere)["error"] == "siwx_payment_not_found"


async def sdk_sign_in(client: httpx.AsyncClient, wallet: Any, method: str, path: str) -> httpx.Response:
    """Sign in the way the Foundation's SDK does: the 402's challenge, its first chain, its client."""
    challenge = await client.request(method, path)
    assert challenge.status_code == 402
    offered = required_of(challenge)["extensions"]["sign-in-with-x"]
    info = offered["info"] | offered["supportedChains"][0]
    payload = await create_siwx_payload(info, wallet, str(challenge.url))
    return await client.request(method, path, headers={"SIGN-IN-WITH-X": encode_siwx_header(payload)})


async def test_bad_sign_ins_get_the_402(deployment: Deployment) -> None:
    app = seller(deployment, second_endpoint(deployment))
    wallet = Account.from_key(deployment.agent_key)
    stranger = Account.create()
    auth = X402Auth(deployment.agent, max_amount="0.05")
    async with httpx.AsyncClient(transport=asgi_transport(app), base_url=ORIGIN, timeout=60) as client:
        assert (await client.get("/weather", auth=auth)).status_code == 200
        good = await signed(client, wallet)
        cases: dict[str, SignInMessage] = {
            "invalid_siwx_domain_mismatch": good_with(good, wallet, domain="evil.example"),
            "invalid_siwx_uri_mismatch": good_with(good, wallet, uri="http://testserver/translate"),
            "invalid_siwx_issued_at_too_old": good_with(good, wallet, issued_at=stamp(-timedelta(minutes=6))),
            "invalid_siwx_issued_at_in_future": good_with(good, wallet, issued_at=stamp(timedelta(minutes=5))),
            "invalid_siwx_expired": good_with(good, wallet, expiration_time=stamp(-timedelta(seconds=1))),
            "invalid_siwx_not_yet_valid": good_with(good, wallet, not_before=stamp(timedelta(minutes=1))),
            "invalid_siwx_chain_id": good_with(good, wallet, chain_id="eip155:1"),
            "siwx_payment_not_found": good_with(good, stranger, address=stranger.address),
            "invalid_siwx_signature": SignInMessage(
                **(fields(good_with(good, wallet)) | {"signature": good.signature})
            ),
        }
        for reason, message in cases.items():
            answer = await client.get("/weather", headers={"SIGN-IN-WITH-X": encode_sign_in(message)})
            assert answer.status_code == 402, (reason, answer.text)
            assert required_of(answer)["error"] == reason, (reason, answer.text)
        for garbage, reason in [
            ("not base64!", "invalid_siwx_payload"),
            (base64.b64encode(b"[1]").decode(), "invalid_siwx_payload"),
            (
                encode_sign_in(SignInMessage(**{**fields(good), "signature": "0x1234"})),
                "invalid_siwx_malformed_signature",
            ),
            ("A" * 9000, "invalid_siwx_payload"),
        ]:
            answer = await client.get("/weather", headers={"SIGN-IN-WITH-X": garbage})
            assert answer.status_code == 402 and required_of(answer)["error"] == reason, answer.text
        # the good one gets in once; its nonce is spent for every process (the platform's database)
        first = await client.get("/weather", headers={"SIGN-IN-WITH-X": encode_sign_in(good)})
        assert first.status_code == 200, first.text
        again = await client.get("/weather", headers={"SIGN-IN-WITH-X": encode_sign_in(good)})
        assert again.status_code == 402 and required_of(again)["error"] == "invalid_siwx_nonce"
        # the Host header does not stand in for the configured origin
        hosted = await client.get(
            "/weather",
            headers={
                "Host": "evil.example",
                "SIGN-IN-WITH-X": encode_sign_in(await signed(client, wallet, host="evil.example")),
            },
        )
        assert hosted.status_code == 402 and required_of(hosted)["error"] == "invalid_siwx_domain_mismatch"


def stamp(delta: timedelta) -> str:
    return (datetime.now(UTC) + delta).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def fields(message: SignInMessage) -> dict[str, Any]:
    return {name: getattr(message, name) for name in SignInMessage.__slots__}


async def signed(client: httpx.AsyncClient, wallet: Any, host: str | None = None) -> SignInMessage:
    """A good message for /weather, from its 402 (with ``host``: one naming that host instead)."""
    challenge = await client.get("/weather")
    info = required_of(challenge)["extensions"]["sign-in-with-x"]["info"]
    message = SignInMessage(
        domain=host or info["domain"],
        address=wallet.address,
        uri=info["uri"] if host is None else f"http://{host}/weather",
        version="1",
        chain_id=required_of(challenge)["accepts"][0]["network"],
        nonce=info["nonce"],
        issued_at=info["issuedAt"],
        signature="0x" + "00" * 65,
        resources=tuple(info["resources"]),
    )
    return good_with(message, wallet)


def good_with(message: SignInMessage, wallet: Any, **changes: Any) -> SignInMessage:
    """``message`` with ``changes`` and a nonce of its own, signed again by ``wallet`` (EIP-191)."""
    changed = SignInMessage(**(fields(message) | {"nonce": secrets.token_hex(12)} | changes))
    signature = wallet.sign_message(encode_defunct(text=changed.text())).signature
    raw = signature.hex() if isinstance(signature, bytes) else str(signature)
    return SignInMessage(**(fields(changed) | {"signature": raw if raw.startswith("0x") else "0x" + raw}))


def test_a_header_round_trips() -> None:
    message = SignInMessage(
        domain="a.example",
        address="0x" + "ab" * 20,
        uri="https://a.example/x",
        version="1",
        chain_id="eip155:8453",
        nonce="abcdef0123456789",
        issued_at="2026-11-26T02:00:00.000Z",
        signature="0x" + "11" * 65,
        statement="Sign in",
        resources=("https://a.example/x",),
    )
    assert decode_sign_in(encode_sign_in(message)) == message


async def test_x402auth_signs_in_before_paying(deployment: Deployment) -> None:
    app = seller(deployment, second_endpoint(deployment))
    first = X402Auth(deployment.agent, max_amount="0.05", sign_in=False)
    later = X402Auth(deployment.agent, max_amount="0.05")  # the same wallet, another process
    async with httpx.AsyncClient(transport=asgi_transport(app), base_url=ORIGIN, timeout=60) as client:
        paid_for = await client.get("/weather", auth=first)
        assert paid_for.status_code == 200 and len(first.payments) == 1
        back = await client.get("/weather", auth=later)
        assert back.status_code == 200, back.text
        assert back.json()["forecast"] == "sunny again"
        assert later.signed_in == 1 and later.payments == [] and later.spent == {}
        # where it has not paid, signing in is refused and it pays
        other = await client.post("/translate", auth=later)
        assert other.status_code == 200, other.text
        assert later.signed_in == 1 and len(later.payments) == 1


async def test_a_smart_account_that_paid_signs_in_with_eip1271(dev_platform: PlatformHarness) -> None:
    from tests.integration.test_smart_accounts import deployed_wallet

    deployment = await asyncio.to_thread(dev_platform.deploy, fund="")
    wallet = await asyncio.to_thread(deployed_wallet, dev_platform, deployment.api_key)
    app = seller(deployment, second_endpoint(deployment))
    first = X402Auth(wallet, max_amount="0.05", sign_in=False)
    later = X402Auth(wallet, max_amount="0.05")
    async with httpx.AsyncClient(transport=asgi_transport(app), base_url=ORIGIN, timeout=60) as client:
        assert (await client.get("/weather", auth=first)).status_code == 200
        back = await client.get("/weather", auth=later)  # the owner's key signs; the wallet's isValidSignature says yes
        assert back.status_code == 200, back.text
        assert later.signed_in == 1 and later.payments == []


def test_a_used_nonce_is_kept_until_its_message_expires(deployment: Deployment) -> None:
    """Retention follows the message's expiry (``expirationTime``, bounded by ``issuedAt`` + 5
    minutes); on both sides of each boundary, a replay is refused by the platform (the nonce) or by
    the middleware (the message's times), never served."""
    harness = deployment.harness
    wallet = Account.from_key(deployment.agent_key)
    sign_in = SignIn(origin=ORIGIN)
    # two hours back: pruning at these times removes only nonces other tests no longer need
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)

    def message(expires: datetime | None) -> SignInMessage:
        unsigned = SignInMessage(
            domain="testserver",
            address=wallet.address,
            uri=f"{ORIGIN}/weather",
            version="1",
            chain_id=harness.network,
            nonce="unused",
            issued_at=start.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            signature="0x",
            expiration_time=expires.isoformat().replace("+00:00", "Z") if expires else None,
        )
        return good_with(unsigned, wallet)

    def seller_says(signed: SignInMessage, seconds: float) -> str:
        try:
            at = (start + timedelta(seconds=seconds)).timestamp()
            sign_in.check(signed, f"{ORIGIN}/weather", harness.network, at)
        except InvalidPaymentError as refusal:
            return str(refusal.reason)
        return "accepted"

    def platform_says(signed: SignInMessage, keep: datetime, seconds: float) -> str:
        async def ask(platform: Any) -> Any:
            return await platform.sign_ins.sign_in(
                merchant_id=deployment.merchant_id,
                livemode=False,
                endpoint_id=deployment.endpoint_id,
                chain_id=harness.chain.chain_id,
                address=wallet.address,
                message=signed.text(),
                signature=bytes.fromhex(signed.signature.removeprefix("0x")),
                nonce=signed.nonce,
                keep_until=keep,
                window_seconds=None,
                now=start + timedelta(seconds=seconds),
            )

        return str(harness.server.call(ask).reason)  # the agent never paid: a fresh nonce is "not found"

    # expiring two minutes after issue: kept until then (and a minute for clocks), not five minutes
    soon = message(start + timedelta(minutes=2))
    keep = sign_in.check(soon, f"{ORIGIN}/weather", harness.network, (start + timedelta(seconds=1)).timestamp())
    assert keep == start + timedelta(minutes=3) == nonce_kept_until(start, start + timedelta(minutes=2))
    assert platform_says(soon, keep, 1) == "siwx_payment_not_found"
    assert seller_says(soon, 119) == "accepted" and platform_says(soon, keep, 119) == "invalid_siwx_nonce"
    assert seller_says(soon, 120) == "invalid_siwx_expired" and platform_says(soon, keep, 179) == "invalid_siwx_nonce"
    platform_says(message(None), keep, 181)  # any sign-in prunes what is past its keeping time
    assert platform_says(soon, keep, 182) == "siwx_payment_not_found"  # forgotten: the platform would take it,
    assert seller_says(soon, 182) == "invalid_siwx_expired"  # but the middleware refuses the message first

    # expiring in a day: accepted only while issuedAt is under five minutes old, kept that long
    later = message(start + timedelta(days=1))
    keep = sign_in.check(later, f"{ORIGIN}/weather", harness.network, (start + timedelta(seconds=1)).timestamp())
    assert keep == start + NONCE_KEPT_AT_MOST == start + timedelta(minutes=6)
    assert platform_says(later, keep, 1) == "siwx_payment_not_found"
    assert seller_says(later, 299) == "accepted" and platform_says(later, keep, 299) == "invalid_siwx_nonce"
    assert seller_says(later, 301) == "invalid_siwx_issued_at_too_old"
    assert platform_says(later, keep, 359) == "invalid_siwx_nonce"

    # the platform keeps a nonce at most an hour: a message said to be valid longer is refused
    fresh = good_with(later, wallet)
    now = datetime.now(UTC)
    body = {
        "endpointId": deployment.endpoint_id,
        "address": wallet.address,
        "message": fresh.text(),
        "signature": fresh.signature,
        "nonce": fresh.nonce,
        "windowSeconds": None,
    }
    with deployment.api() as api:
        too_long = api.post("/agent/sign-ins", json=body | {"keepUntil": int((now + timedelta(hours=2)).timestamp())})
        assert too_long.status_code == 200, too_long.text
        assert too_long.json() == {
            "signedIn": False,
            "reason": "invalid_siwx_expired",
            "message": "the sign-in message stays valid too long: sign one that expires within the hour",
        }
        within = api.post("/agent/sign-ins", json=body | {"keepUntil": int((now + timedelta(minutes=5)).timestamp())})
        assert within.status_code == 200 and within.json()["reason"] == "siwx_payment_not_found", within.text


def sdk_seller(deployment: Deployment) -> FastAPI:
    """A seller on the Foundation's SDK settling through our facilitator API: ``GET /weather``
    declares the bazaar extension, ``GET /plain`` does not; both pay the endpoint's payout address."""
    harness = deployment.harness
    headers = {"Authorization": f"Bearer {deployment.api_key}"}
    facilitator = HTTPFacilitatorClient(
        {
            "url": harness.url + "/x402",
            "create_headers": lambda: {"verify": headers, "settle": headers, "supported": headers},
        }
    )
    server = x402ResourceServer(facilitator)
    server.register("eip155:*", ExactEvmServerScheme())
    server.register_extension(bazaar_resource_server_extension)
    price = {"amount": "10000", "asset": harness.usdc, "extra": {"name": "USD Coin", "version": "2"}}
    offer = PaymentOption(scheme="exact", pay_to=deployment.payout, price=price, network=harness.network)
    declared = declare_discovery_extension(
        input={"city": "Oslo"},
        input_schema={"properties": {"city": {"type": "string"}}},
        output=OutputConfig(example={"forecast": "sunny"}),
    )
    routes = {
        "GET /weather": RouteConfig(accepts=offer, description="Forecasts by city", extensions=declared),
        "GET /plain": RouteConfig(accepts=offer, description="Undeclared"),
    }

    @contextlib.asynccontextmanager
    async def closing(app: FastAPI) -> AsyncIterator[None]:
        yield
        await facilitator.aclose()

    app = FastAPI(lifespan=closing)
    app.add_middleware(PaymentMiddlewareASGI, routes=routes, server=server)

    @app.get("/weather")
    async def weather(city: str = "Paris") -> dict[str, str]:
        return {"forecast": "sunny"}

    @app.get("/plain")
    async def plain() -> dict[str, str]:
        return {"plain": "yes"}

    return app


async def test_settlements_through_the_facilitator_api_are_catalogued(dev_platform: PlatformHarness) -> None:
    listed, hidden = dev_platform.deploy(), dev_platform.deploy()
    make_discoverable(listed)
    for deployment in (listed, hidden):
        app = sdk_seller(deployment)
        agent = x402Client()
        agent.register("eip155:*", ExactEvmScheme(signer=EthAccountSigner(Account.from_key(deployment.agent_key))))
        usdc = {"network": dev_platform.network, "asset": dev_platform.usdc, "max_amount_per_payment": "50000"}
        agent.set_spend_controls({"allowed_assets": [usdc]})
        transport = x402AsyncTransport(agent, asgi_transport(app))
        async with lifespan(app), httpx.AsyncClient(transport=transport, base_url=ORIGIN, timeout=60) as client:
            for path in ("/weather?city=Oslo", "/plain"):
                paid_for = await client.get(path)
                assert paid_for.status_code == 200, paid_for.text
                assert "PAYMENT-RESPONSE" in paid_for.headers
    with bazaar(dev_platform) as client:
        page = await asyncio.to_thread(
            client.extensions.bazaar.list_resources, ListDiscoveryResourcesParams(pay_to=listed.payout)
        )
        # the discoverable endpoint, as its merchant declared it (its URL and name) with the seller's
        # terms; the payload's resource and bazaar extension are the payer's echo, and not listed
        assert [item.resource for item in page.items] == [f"{ORIGIN}/weather"]
        item = page.items[0]
        assert item.description == "Weather" and item.type == "http"
        assert item.accepts[0]["payTo"] == listed.payout and item.accepts[0]["amount"] == "10000"
        assert item.extensions is None
        nothing = await asyncio.to_thread(
            client.extensions.bazaar.list_resources, ListDiscoveryResourcesParams(pay_to=hidden.payout)
        )
        assert nothing.items == []  # the merchant that did not opt in


def test_a_search_ranks_names_first_then_the_most_settled(deployment: Deployment) -> None:
    harness = deployment.harness
    make_discoverable(deployment)
    word = "zq" + secrets.token_hex(4)  # found in this test's resources only
    # (query in the URL, description, settlements): recorded by the catalogue the settlements use
    resources = {
        "url, settled once": (f"?q={word}", "plain", 1),
        "description, settled thrice": ("?x=1", f"about {word}", 3),
        "url, settled thrice": (f"?r={word}", "plain", 3),
        "description, settled once": ("?y=2", f"{word} too", 1),
    }

    # the catalogue lists an endpoint under its own URL: one endpoint each
    endpoint_ids = []
    with deployment.api() as api:
        for query, _, _ in resources.values():
            body = {"name": "Weather", "chainId": harness.chain.chain_id, "currency": "USDC", "amountMinor": "10000"}
            body |= {"resourceUrl": f"{ORIGIN}/weather{query}", "payoutAddress": deployment.payout}
            reply = api.post("/agent/endpoints", json=body | {"discoverable": True})
            assert reply.status_code == 201, reply.text
            endpoint_ids.append(reply.json()["endpoint"]["id"])

    async def record(platform: Any) -> None:
        for endpoint_id, (_, description, times) in zip(endpoint_ids, resources.values(), strict=True):
            endpoint = await platform.endpoints.get(deployment.merchant_id, False, endpoint_id, fresh=True)
            for _ in range(times):  # each as another process would (a catalogue writes a resource once a minute)
                await Catalogue(platform.engine).record(
                    endpoint,
                    accepted={"scheme": "exact", "network": harness.network, "amount": "10000"},
                    description=description,
                    mime_type=None,
                    seller_extensions=None,
                    settled_at=datetime.now(UTC),
                )

    harness.server.call(record)
    ranked = [f"{ORIGIN}/weather{resources[name][0]}" for name in resources]
    ranked = [ranked[2], ranked[0], ranked[1], ranked[3]]
    with httpx.Client(base_url=harness.url) as client:
        found = client.get("/x402/discovery/search", params={"query": word, "limit": 10})
        assert found.status_code == 200, found.text
        assert [item["resource"] for item in found.json()["resources"]] == ranked
        assert found.json()["pagination"]["cursor"] is None
        # page by page: the same order, each resource once
        paged, cursor = [], "0"
        while cursor is not None:
            params = {"query": f"weather {word}", "limit": 1, "cursor": cursor}
            page = client.get("/x402/discovery/search", params=params)
            assert page.status_code == 200, page.text
            paged += [item["resource"] for item in page.json()["resources"]]
            cursor = page.json()["pagination"]["cursor"]
        assert paged == ranked
        # the listing stays newest first
        listed = client.get("/x402/discovery/resources", params={"payTo": deployment.payout})
        assert listed.json()["items"][0]["resource"] == ranked[3]
