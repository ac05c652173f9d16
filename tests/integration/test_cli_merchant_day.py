"""``x402mw platform endpoints list|create|show|update`` and ``users list|invite`` against a real
``x402mw platform serve`` on SQLite: prices as decimals of their coin in and out,
the API agreeing in minor units, bad prices refused in one line with exit status 2, and an
invitation link the running dashboard opens."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.cli_runs import run_cli
from tests.harness import Serve, postgres_database, serving
from x402mw.evm.keys import address_of, new_private_key
from x402mw.platform.chain.devchain import DEV_CHAIN_ID


@pytest.fixture(scope="module")
def served(database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    """One serve for the file's tests: each makes merchants of its own and sees only theirs."""
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(postgres_database()) if database == "postgresql" else None
        yield stack.enter_context(serving(tmp_path_factory.mktemp("served") / "data", url))


def _run(serve: Serve, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The command in this process (what it says and does is tested here, not its process)."""
    return run_cli(["platform", *args], serve.env(), stdin)


def _json(serve: Serve, *args: str, lines: bool = False) -> Any:
    done = _run(serve, *args, "--json")
    assert done.returncode == 0, done.stderr + done.stdout
    if lines:
        return [json.loads(line) for line in done.stdout.splitlines()]
    return json.loads(done.stdout)


def _refused(serve: Serve, *args: str) -> str:
    """The one line a refused command says (exit status 2, nothing on standard output)."""
    done = _run(serve, *args)
    assert done.returncode == 2, done.stderr + done.stdout
    assert done.stdout == "" and len(done.stderr.strip().splitlines()) == 1, done.stderr
    return done.stderr.strip()


def test_endpoints_priced_in_decimals(served: Serve) -> None:
    merchant = _json(served, "merchants", "create", "--name", "Weather Co")["id"]
    key = _json(served, "keys", "create", "--merchant", merchant)["key"]
    payout = address_of(new_private_key())
    base = ["endpoints", "create", "--merchant", merchant, "--name", "Forecast", "--payout-address", payout]
    made = _json(served, *base, "--resource-url", "https://api.weather.test/forecast", "--price", "0.01", "USDC")
    assert made["price"] == "0.01 USDC" and made["pricingMode"] == "fixed" and made["livemode"] is False
    assert made["network"] == f"eip155:{DEV_CHAIN_ID}" and made["payoutAddress"] == payout
    # the API sees the same endpoint, its price in minor units
    with httpx.Client(base_url=served.url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as api:
        answer = api.get(f"/agent/endpoints/{made['id']}")
        assert answer.status_code == 200, answer.text
        assert answer.json()["endpoint"]["amountMinor"] == "10000"
    listed = _json(served, "endpoints", "list", "--merchant", merchant, lines=True)
    assert [(e["id"], e["name"], e["price"]) for e in listed] == [(made["id"], "Forecast", "0.01 USDC")]
    assert _json(served, "endpoints", "list", "--merchant", merchant, "--mode", "live", lines=True) == []
    assert _json(served, "endpoints", "show", made["id"], "--merchant", merchant) == made
    table = _run(served, "endpoints", "list", "--merchant", merchant).stdout.splitlines()
    assert table[0].split()[:4] == ["id", "name", "pricingMode", "price"] and "0.01 USDC" in table[1]
    # a new price, to the coin's sixth decimal
    update = ["endpoints", "update", made["id"], "--merchant", merchant]
    changed = _json(served, *update, "--price", "0.000025", "USDC")
    assert changed["price"] == "0.000025 USDC" and changed["name"] == "Forecast"
    with httpx.Client(base_url=served.url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as api:
        assert api.get(f"/agent/endpoints/{made['id']}").json()["endpoint"]["amountMinor"] == "25"
    assert _json(served, "endpoints", "show", made["id"], "--merchant", merchant)["price"] == "0.000025 USDC"
    # bad prices: one line, exit status 2, nothing made or changed
    url = ["--resource-url", "https://api.weather.test/other"]
    for amount, said in [
        ("0.0000001", "at most 6 decimals"),
        ("0", "greater than zero"),
        ("-1", "not a plain decimal number"),
        ("ten", "not a plain decimal number"),
        ("1e-3", "not a plain decimal number"),
    ]:
        assert said in _refused(served, *base, *url, "--price", amount, "USDC")
        assert said in _refused(
            served, "endpoints", "update", made["id"], "--merchant", merchant, "--price", amount, "USDC"
        )
    assert "USDC or EURC" in _refused(served, *base, *url, "--price", "1", "DOGE")
    assert "needs --price" in _refused(served, *base, *url)
    assert "priced in USDC" in _refused(
        served, "endpoints", "update", made["id"], "--merchant", merchant, "--price", "1", "EURC"
    )
    assert [e["id"] for e in _json(served, "endpoints", "list", "--merchant", merchant, lines=True)] == [made["id"]]
    assert _json(served, "endpoints", "show", made["id"], "--merchant", merchant)["price"] == "0.000025 USDC"
    # metered: a ceiling (--max-price) in place of a price, the API holding it as maxAmountMinor
    metered = _json(
        served, *base, "--resource-url", "https://api.weather.test/ask", "--pricing-mode", "metered",
        "--max-price", "0.05", "USDC",
    )  # fmt: skip
    assert metered["pricingMode"] == "metered" and metered["maxPrice"] == "0.05 USDC" and metered["price"] is None
    with httpx.Client(base_url=served.url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as api:
        seen = api.get(f"/agent/endpoints/{metered['id']}").json()["endpoint"]
        assert (seen["pricingMode"], seen["maxAmountMinor"], seen["amountMinor"]) == ("metered", "50000", None)
    raised = _json(served, "endpoints", "update", metered["id"], "--merchant", merchant, "--max-price", "0.1", "USDC")
    assert raised["maxPrice"] == "0.10 USDC" or raised["maxPrice"] == "0.1 USDC", raised
    metered_base = [*base, *url, "--pricing-mode", "metered"]
    assert "takes --max-price" in _refused(served, *metered_base)
    assert "takes --max-price" in _refused(served, *metered_base, "--price", "0.01", "USDC")
    assert "for --pricing-mode metered only" in _refused(served, *base, *url, "--max-price", "0.05", "USDC")
    assert "--max-price must be greater than zero" in _refused(served, *metered_base, "--max-price", "0", "USDC")
    fixed_again = _run(served, "endpoints", "update", made["id"], "--merchant", merchant, "--max-price", "1", "USDC")
    assert fixed_again.returncode == 1 and "metered" in fixed_again.stderr, fixed_again.stderr
    # what the service refuses: a live endpoint on the test chain; an endpoint of another merchant
    refused = _run(served, *base, *url, "--price", "1", "USDC", "--mode", "live")
    assert refused.returncode == 1 and "settles on no live chain" in refused.stderr, refused.stderr
    refused = _run(served, *base, *url, "--price", "1", "USDC", "--mode", "live", "--chain-id", str(DEV_CHAIN_ID))
    assert refused.returncode == 1 and "is a test network" in refused.stderr, refused.stderr
    other = _json(served, "merchants", "create", "--name", "Other Co")["id"]
    missing = _run(served, "endpoints", "update", made["id"], "--merchant", other, "--price", "1", "USDC")
    assert missing.returncode == 1 and "No such agent endpoint" in missing.stderr, missing.stderr


def test_users_invite_and_list(served: Serve) -> None:
    merchant = _json(served, "merchants", "create", "--name", "Team Co")["id"]
    assert _json(served, "users", "list", "--merchant", merchant, lines=True) == []
    owner = ["users", "create", "--merchant", merchant, "--email", "boss@team.test", "--password-stdin", "--json"]
    done = _run(served, *owner, stdin="correct horse battery\n")
    assert done.returncode == 0, done.stderr
    invite = ["users", "invite", "--merchant", merchant, "--port", str(served.port)]
    invited = _json(served, *invite, "--email", "Ada@Team.test", "--role", "support")
    assert invited["email"] == "ada@team.test" and invited["role"] == "support"
    link = invited["link"]
    assert link.startswith(f"http://127.0.0.1:{served.port}/dashboard/invitations/")
    page = httpx.get(link, timeout=60)  # the running dashboard opens it: the form to choose a password
    assert page.status_code == 200 and "ada@team.test" in page.text
    text = _run(served, *invite, "--email", "bo@team.test", "--role", "viewer")
    assert text.returncode == 0 and "link: http://127.0.0.1:" in text.stdout
    # the users are those who have an account; an invitation is not one until accepted
    users = _json(served, "users", "list", "--merchant", merchant, lines=True)
    assert [(u["email"], u["role"], u["twoFactor"]) for u in users] == [("boss@team.test", "owner", False)]
    table = _run(served, "users", "list", "--merchant", merchant).stdout.splitlines()
    assert table[0].split() == ["id", "email", "role", "twoFactor"] and "boss@team.test" in table[1]
    # refused: an unknown merchant, a role that does not exist, a malformed email
    unknown = _run(served, "users", "invite", "--merchant", "nope", "--email", "x@team.test", "--role", "viewer")
    assert unknown.returncode == 1 and "no merchant nope" in unknown.stderr
    assert _run(served, *invite, "--email", "x@team.test", "--role", "king").returncode == 2
    bad = _run(served, *invite, "--email", "not an email", "--role", "viewer")
    assert bad.returncode == 1 and "valid email" in bad.stderr
