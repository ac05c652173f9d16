"""``x402mw check`` against real servers: a seller whose every route breaks its 402 a different way,
and the gateway (whose 402s are valid)."""

from __future__ import annotations

import base64
import copy
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.gateway_fixtures import ROOT, running_gateway, upstream_process
from tests.harness import PlatformHarness, serve_app, sqlite_only
from x402mw.gateway.check import check_urls
from x402mw.protocol.networks import get_network

_NETWORK = get_network("eip155:84532")
assert _NETWORK is not None
VALID: dict[str, Any] = {
    "x402Version": 2,
    "resource": {"url": "http://seller.example/ok", "description": "a valid route"},
    "accepts": [
        {
            "scheme": "exact",
            "network": "eip155:84532",
            "amount": "10000",
            "asset": _NETWORK.assets["USDC"].address,
            "payTo": "0x" + "ab" * 20,
            "maxTimeoutSeconds": 300,
            "extra": {"name": "USDC", "version": "2"},
        }
    ],
    "extensions": {
        "bazaar": {
            "info": {"input": {"type": "http", "method": "GET"}, "output": {"type": "json"}},
            "schema": {"type": "object"},
        }
    },
}


def _broken(change: Any) -> dict[str, Any]:
    terms = copy.deepcopy(VALID)
    change(terms)
    return terms


BROKEN: dict[str, tuple[Any, str]] = {
    "/unknown-network": (_broken(lambda t: t["accepts"][0].update(network="eip155:999999")), "unknown network"),
    "/unknown-asset": (_broken(lambda t: t["accepts"][0].update(asset="0x" + "12" * 20)), "not a known token"),
    "/no-payee": (_broken(lambda t: t["accepts"][0].update(payTo="0x" + "00" * 20)), "payTo"),
    "/zero-amount": (_broken(lambda t: t["accepts"][0].update(amount="0")), "amount 0 is not positive"),
    "/no-domain": (_broken(lambda t: t["accepts"][0].update(extra={})), "EIP-712 name and version"),
    "/v1": (_broken(lambda t: t.update(x402Version=1)), "x402Version is 1"),
    "/no-accepts": (_broken(lambda t: t.update(accepts=[])), "accepts is empty"),
    "/bad-terms": (_broken(lambda t: t["accepts"][0].pop("payTo")), "do not parse"),
    "/bad-discovery": (_broken(lambda t: t["extensions"]["bazaar"].update(info={"input": {"type": "ftp"}})), "bazaar"),
}


def _seller() -> Starlette:
    async def paid(request: Request) -> Response:
        path = request.url.path
        if path == "/ok":
            terms = VALID
        elif path in BROKEN:
            terms = BROKEN[path][0]
        elif path == "/no-header":
            return JSONResponse({"error": "pay"}, status_code=402)
        elif path == "/not-base64":
            return Response(status_code=402, headers={"PAYMENT-REQUIRED": "%%%"})
        else:
            return JSONResponse({"free": True})  # /free: a "paid" route that answers 200 unpaid
        encoded = base64.b64encode(json.dumps(terms).encode()).decode()
        return JSONResponse({}, status_code=402, headers={"PAYMENT-REQUIRED": encoded})

    async def manifest(request: Request) -> JSONResponse:
        base = f"http://{request.headers['host']}"
        paths = ["/ok", *BROKEN, "/no-header", "/not-base64", "/free"]
        items = [
            {"resource": {"url": base + p}, "accepts": VALID["accepts"], "input": {"method": "GET"}} for p in paths
        ]
        return JSONResponse({"x402Version": 2, "items": items})

    paths = ["/ok", *BROKEN, "/no-header", "/not-base64", "/free"]
    return Starlette(routes=[Route("/.well-known/x402", manifest), *(Route(p, paid) for p in paths)])


@pytest.fixture(scope="module")
def seller() -> Iterator[str]:
    with serve_app(_seller()) as url:
        yield url


def test_each_kind_of_broken_402_is_found(seller: str) -> None:
    reports = {report.url.removeprefix(seller): report for report in check_urls([seller])}
    assert reports["/ok"].problems == []
    for path, (_, said) in BROKEN.items():
        assert any(said in p for p in reports[path].problems), (path, reports[path].problems)
    assert reports["/no-header"].problems == ["the 402 has no PAYMENT-REQUIRED header (x402 v2)"]
    assert reports["/not-base64"].problems == ["PAYMENT-REQUIRED is not base64 of JSON"]
    assert reports["/free"].problems == ["an unpaid request answered 200, not 402"]


def test_a_url_with_a_path_is_checked_itself(seller: str) -> None:
    (ok,) = check_urls([seller + "/ok"])
    assert (ok.status, ok.problems) == (402, [])
    (missing,) = check_urls([seller.replace("http://", "http://x.invalid.") + "/"])
    assert missing.problems and "cannot fetch" in missing.problems[0]


def test_the_command_exits_1_on_a_problem_and_0_without(seller: str) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    failing = subprocess.run(
        [sys.executable, "-m", "x402mw", "check", seller], env=env, capture_output=True, text=True, timeout=60
    )
    assert failing.returncode == 1, failing.stdout + failing.stderr
    assert "ok   GET " + seller + "/ok" in failing.stdout
    assert "FAIL GET " + seller + "/zero-amount" in failing.stdout
    passing = subprocess.run(
        [sys.executable, "-m", "x402mw", "check", "--json", seller + "/ok"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert passing.returncode == 0, passing.stdout + passing.stderr
    assert json.loads(passing.stdout)["problems"] == []


@sqlite_only
def test_the_gateways_402s_pass(dev_platform: PlatformHarness) -> None:
    deployment = dev_platform.deploy(fund="")
    with upstream_process() as upstream, running_gateway(dev_platform, upstream, deployment) as gateway:
        reports = check_urls([gateway.url], extra_networks={dev_platform.network})
    assert len(reports) == 9
    assert [r.problems for r in reports] == [[]] * 9
