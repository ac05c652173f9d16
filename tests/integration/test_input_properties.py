"""Property tests of the platform's public inputs, against a running platform on SQLite and
PostgreSQL: whatever text a header, a query value or a form field holds (digits of other scripts,
``²``, numbers past any column, dates without a next day, NUL, any Unicode), the answer is never a
500 and is in its surface's documented shape: the API's error envelope, an x402 402 with its
``PAYMENT-REQUIRED`` challenge, the dashboard's and the checkout's own HTML pages.

The draws are derandomized and bounded (a few dozen examples a property), so a run repeats and
takes seconds."""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.dashboard_fixtures import PASSWORD, Team, csrf_of, enable_two_factor, make_team, post_sign_in
from tests.harness import PlatformHarness, serve_app
from tests.sellers import starlette_app
from x402mw.platform.openapi.document import build_document
from x402mw.protocol import decode_payment_required, encode_header

pytestmark = [
    pytest.mark.both_databases,
    pytest.mark.filterwarnings("ignore::hypothesis.errors.NonInteractiveExampleWarning"),
]  # NUL and numbers past a column: PostgreSQL refuses what SQLite stores


def bounded(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


ODD = [
    "",
    "0",
    "-1",
    "²",
    "²²²²²²",
    "١٢٣٤٥٦",
    "１１１１１１",
    "٢٠٢٦-01-01",
    "9" * 25,
    "9999-12-31",
    "9999-12",
    "0000-00-00",
    "9999-12-31T23:59:59-01:00",
    "2026-01-01T00:00:00",
    "é" * 32,
    "é" * 43,
    "\u2028" * 43,
    "ｆ" * 32,
    "\x00",
    "a\x00b",
    "\ufeff",
    "💥",
    "x" * 3000,
    str(uuid.uuid4()),
    "%",
    "NaN",
    "1e400",
]
"""Values each reader of the platform has been seen, or could be, to take wrongly."""
TEXT = st.one_of(st.sampled_from(ODD), st.text(max_size=40), st.from_regex(r"[0-9٠-٩０-９²³¹-]{1,30}", fullmatch=True))
# a header can carry any byte but the controls (h11 refuses them on the way out), trimmed
HEADER = TEXT.map(lambda text: bytes(b for b in text.encode() if b >= 0x20 and b != 0x7F).strip(b" "))


def _api_shaped(response: httpx.Response) -> bool:
    if response.status_code < 400:
        return True
    try:
        error = response.json()["error"]
    except (ValueError, KeyError, TypeError):
        return False
    return isinstance(error, dict) and {"type", "code", "message", "requestId"} <= set(error)


def _html(response: httpx.Response) -> bool:
    return response.headers.get("content-type", "").startswith("text/html") or response.status_code == 303


def _no_500(response: httpx.Response, shaped: bool, what: object) -> None:
    assert response.status_code < 500, (response.status_code, response.text[:300], what)
    assert shaped, (response.status_code, response.headers.get("content-type"), response.text[:300], what)


@pytest.fixture
def team(dev_platform: PlatformHarness) -> Team:
    return make_team(dev_platform)


def _list_operations() -> list[tuple[str, list[str]]]:
    """Each GET of the API without a path parameter, with the query parameters it documents."""
    document = build_document()
    found = []
    for path, methods in document["paths"].items():
        operation = methods.get("get")
        if operation is None or "{" in path:
            continue
        names = []
        for parameter in operation.get("parameters", []):
            if "$ref" in parameter:
                parameter = document["components"]["parameters"][parameter["$ref"].rsplit("/", 1)[-1]]
            if parameter.get("in") == "query":
                names.append(parameter["name"])
        found.append((path, names or ["limit"]))
    return found


LISTS = _list_operations()


LIST_QUERIES = st.sampled_from(LISTS).flatmap(
    lambda listing: st.tuples(st.just(listing[0]), st.dictionaries(st.sampled_from(listing[1]), TEXT, max_size=3))
)


def test_api_headers_and_query_values(team: Team) -> None:
    origin = team.harness.url.removesuffix("/v1")
    with httpx.Client(base_url=origin, timeout=60) as client:

        @bounded(100)
        @given(LIST_QUERIES, st.sampled_from(["Authorization", "x-api-key", "Idempotency-Key", None]), HEADER)
        @example(("/v1/agent/usage", {"month": "9999-12"}), None, b"")  # a month without a next one, seen
        @example(("/v1/payment-intents", {}), "Authorization", "sk_test_é".encode())
        def check(listing: tuple[str, dict[str, str]], header: str | None, value: bytes) -> None:
            path, params = listing
            headers: dict[str, str | bytes] = {"Authorization": f"Bearer {team.api_key}"}
            if header == "Authorization":
                headers[header] = (b"Bearer " + value).strip(b" ")
            elif header is not None:
                headers = ({} if header == "x-api-key" else headers) | {header: value}
            method = "POST" if header == "Idempotency-Key" else "GET"
            target = "/v1/payment-intents" if method == "POST" else path
            body = {"orderId": f"p-{uuid.uuid4()}", "amount": "1", "currency": "USDC"} if method == "POST" else None
            response = client.request(method, target, params=params, headers=headers, json=body)
            _no_500(response, _api_shaped(response), (method, target, params, headers))

        check()


@contextlib.contextmanager
def _seller(team: Team) -> Iterator[tuple[httpx.Client, dict[str, Any]]]:
    endpoint = team.harness.deploy()
    app = starlette_app(endpoint.api_key, team.harness.url, endpoint.endpoint_id)
    with serve_app(app) as url, httpx.Client(base_url=url, timeout=60) as client:
        offer = decode_payment_required(client.get("/weather").headers["PAYMENT-REQUIRED"]).accepts[0]
        yield client, endpoint.agent.sign_payment(offer).to_wire()


JSON_VALUE = st.one_of(TEXT, st.integers(min_value=-(2**70), max_value=2**70), st.none(), st.booleans())


def test_payment_signatures_on_a_paid_route(team: Team) -> None:
    with _seller(team) as (client, payload):

        @bounded(80)
        @given(
            st.one_of(
                HEADER,
                st.fixed_dictionaries(
                    {
                        "field": st.sampled_from(["seal", "challengeId", "expiresAt", "name", "version"]),
                        "value": JSON_VALUE,
                        "where": st.sampled_from(["extra", "authorization", "accepted"]),
                    }
                ),
            )
        )
        def check(change: bytes | dict[str, Any]) -> None:
            header: str | bytes = change if isinstance(change, bytes) else ""
            if isinstance(change, dict):
                sent = {**payload, "accepted": {**payload["accepted"], "extra": dict(payload["accepted"]["extra"])}}
                sent["payload"] = {**payload["payload"], "authorization": dict(payload["payload"]["authorization"])}
                target = {
                    "extra": sent["accepted"]["extra"],
                    "authorization": sent["payload"]["authorization"],
                    "accepted": sent["accepted"],
                }[change["where"]]
                target[change["field"] if change["where"] == "extra" else _field(change)] = change["value"]
                header = encode_header(sent)
            response = client.get("/weather", headers={"PAYMENT-SIGNATURE": header})
            # refused with a fresh challenge, or paid (what the seal does not cover may change)
            shaped = "payment-required" in response.headers if response.status_code == 402 else response.is_success
            _no_500(response, shaped, change)

        check()


def _field(change: dict[str, Any]) -> str:
    if change["where"] == "authorization":
        return {"seal": "nonce", "challengeId": "from", "expiresAt": "validBefore"}.get(change["field"], "value")
    return {"seal": "amount", "challengeId": "network", "expiresAt": "maxTimeoutSeconds"}.get(change["field"], "payTo")


def test_the_facilitators_seal_check(team: Team) -> None:
    endpoint = team.harness.deploy()
    requirements = {
        "scheme": "exact",
        "network": team.harness.network,
        "amount": "5000",
        "asset": team.harness.usdc,
        "payTo": endpoint.payout,
        "maxTimeoutSeconds": 120,
        "extra": {"name": "USD Coin", "version": "2", "challengeId": "c" * 32, "expiresAt": 4_000_000_000},
    }
    from x402mw.protocol import PaymentRequirements

    payload = endpoint.agent.sign_payment(PaymentRequirements.model_validate(requirements)).to_wire()
    with endpoint.api() as api:

        @bounded(40)
        @given(st.sampled_from(["/x402/verify", "/x402/settle"]), JSON_VALUE, TEXT)
        def check(operation: str, seal: Any, challenge: str) -> None:
            # a challenge id that is text, of a challenge the platform has no record of: its seal is checked
            extra = requirements["extra"] | {"seal": seal, "challengeId": challenge or "c"}  # type: ignore[operator]
            body = {"x402Version": 2, "paymentPayload": payload, "paymentRequirements": requirements | {"extra": extra}}
            response = api.post(operation, json=body)
            _no_500(response, _api_shaped(response), (operation, seal, challenge))

        check()
    assert team.harness.balance(endpoint.payout) == 0


DASHBOARD_LISTS = {
    "/dashboard/payments": ["status", "coin", "network", "since", "until", "link", "customer", "q", "after"],
    "/dashboard/subscriptions": ["status", "customer", "notice"],
    "/dashboard/developers/requests": ["request_id", "notice"],
    "/dashboard/account": ["setup", "notice"],
    "/dashboard/refunds": ["notice"],
}


def test_dashboard_filters(team: Team) -> None:
    team.order()
    with team.sign_in("viewer") as client:

        @bounded(80)
        @given(st.sampled_from(sorted(DASHBOARD_LISTS)), st.data())
        def check(path: str, data: Any) -> None:
            names = data.draw(st.lists(st.sampled_from(DASHBOARD_LISTS[path]), min_size=1, max_size=3))
            params = {name: data.draw(TEXT) for name in names}
            response = client.get(path, params=params)
            # a NUL in a URL is refused before any surface sees it, in the API's envelope
            shaped = _api_shaped(response) if "\x00" in "".join(params.values()) else _html(response)
            _no_500(response, shaped, (path, params))

        check()


def test_dashboard_and_checkout_forms(team: Team) -> None:
    with team.sign_in("developer") as client:
        enable_two_factor(client)
    with team.api() as api:
        made = api.post(
            "/subscription-plans", json={"name": "Club", "amount": "5", "currency": "USDC", "interval": "monthly"}
        )
        assert made.status_code == 201, made.text
    subscribe = made.json()["plan"]["checkoutUrl"]
    # another address than the other tests' sign-ins: the per-address throttle is theirs
    transport = httpx.HTTPTransport(local_address="127.0.0.2")
    with httpx.Client(base_url=team.origin, timeout=60, transport=transport) as visitor, team.sign_in() as owner:
        post_sign_in(visitor, team.users["developer"].email, PASSWORD)  # past the password, not the code
        owner_csrf = csrf_of(owner.get("/dashboard/").text)
        plan = {"name": "Club", "amount": "5", "currency": "USDC", "interval": "monthly", "grace_days": "3"}
        forms: dict[str, tuple[httpx.Client, dict[str, str]]] = {
            "/dashboard/sign-in": (visitor, {"csrf": "", "email": "someone@shop.test", "password": "wrong password"}),
            "/dashboard/sign-in/two-factor": (visitor, {"csrf": "", "code": "123456"}),
            "/dashboard/account/two-factor": (owner, {"csrf": owner_csrf, "action": "start", "code": "123456"}),
            "/dashboard/plans": (owner, {"csrf": owner_csrf, **plan}),
            "/dashboard/team/invitations": (owner, {"csrf": owner_csrf, "email": "new@shop.test", "role": "viewer"}),
            "/dashboard/mode": (owner, {"csrf": owner_csrf, "mode": "test"}),
            subscribe: (visitor, {"token": "", "email": "buyer@example.com", "customer": ""}),
        }
        queries = {subscribe: ["customer", "expires", "signature"], "/dashboard/sign-in": ["notice"]}

        @bounded(100)
        @given(st.sampled_from(sorted(forms)), st.data())
        def check(path: str, data: Any) -> None:
            client, fields = forms[path]
            fields = dict(fields)
            params = {name: data.draw(TEXT) for name in data.draw(st.lists(st.sampled_from(queries.get(path, ["x"]))))}
            if path.startswith("/dashboard/sign-in"):  # the visitor's current form token, unless drawn
                fields["csrf"] = csrf_of(client.get(path).text)
            elif path == subscribe:
                fields["token"] = _form_token(client.get(path).text)
            for name in data.draw(st.lists(st.sampled_from(sorted(fields)), min_size=1, max_size=2, unique=True)):
                fields[name] = data.draw(TEXT)
            response = client.post(path, params=params, data=fields)
            # a NUL in a URL is refused before any surface sees it, in the API's envelope
            shaped = _api_shaped(response) if "\x00" in "".join(params.values()) else _html(response)
            _no_500(response, shaped, (path, params, fields))

        check()


def _form_token(html: str) -> str:
    found = re.search(r'name="token" value="([^"]+)"', html)
    assert found is not None, html[:500]
    return found.group(1)
