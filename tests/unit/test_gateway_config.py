"""The gateway's configuration file: what it accepts, and every problem named at once."""

from __future__ import annotations

import tomllib
from decimal import Decimal

import pytest

from x402mw.errors import ConfigurationError, PriceError
from x402mw.gateway.config import parse_config

BASE = 'coin = "USDC"\nnetwork = "eip155:84532"\n'


def _parse(text: str) -> list[str]:
    with pytest.raises(ConfigurationError) as caught:
        parse_config(tomllib.loads(BASE + text))
    return caught.value.problems


def test_a_good_file_is_read_into_routes() -> None:
    config = parse_config(
        tomllib.loads(
            BASE
            + """
upstream = "http://127.0.0.1:9000"
[[routes]]
method = "get"
path = "/weather/{city}"
price = "0.01"
[[routes]]
path = "/generate"
scheme = "upto"
price = "0.5"
network = "base-sepolia"
usage_header = "X-Tokens"
unit_price = "0.0001"
"""
        )
    )
    weather, generate = config.routes
    assert (weather.key, weather.amount, weather.price, weather.scheme) == (
        "GET /weather/{city}",
        10_000,
        Decimal("0.01"),
        "exact",
    )
    assert (generate.key, generate.amount, generate.network, generate.unit_atomic) == (
        "/generate",
        500_000,
        "eip155:84532",
        100,
    )
    assert generate.usage("12") == 1_200
    assert generate.usage(None) == 0
    with pytest.raises(PriceError):
        generate.usage("-1")


def test_a_usage_header_without_unit_price_is_a_decimal_of_the_coin() -> None:
    (route,) = parse_config(
        tomllib.loads(BASE + '[[routes]]\npath = "/g"\nscheme = "upto"\nprice = "1"\nusage_header = "X-Cost"\n')
    ).routes
    assert route.usage("0.0025") == 2_500
    with pytest.raises(PriceError):
        route.usage("0.0000001")


@pytest.mark.parametrize(
    ("route", "problem"),
    [
        ('path = "/a"\nprice = "0.01"\ncoin = "DOGE"', "unknown coin 'DOGE'"),
        ('path = "/a"\nprice = "0.01"\nnetwork = "moonbase"', "unknown network 'moonbase'"),
        ('path = "/a"\nprice = "0.0000001"', "the smallest unit of USDC is 0.000001"),
        ('path = "/a"\nprice = 0.01', "not a float"),
        ('path = "/a"\nprice = "0"', "greater than zero"),
        ('path = "/a"\nprice = "0.01"\ncoin = "USDT"', "unknown coin 'USDT'"),
        ('path = "a"\nprice = "0.01"', "path must start with '/'"),
        ('path = "/a/{rest:path}/b"\nprice = "0.01"', "path must start with '/'"),
        ('path = "/a"\nprice = "0.01"\nscheme = "upto"', "needs usage_header"),
        ('path = "/a"\nprice = "0.01"\nusage_header = "X-U"', "for scheme = 'upto' only"),
        ('path = "/a"\nprice = "0.01"\nmethod = "FETCH"', "method must be one of"),
        ('path = "/a"\nprice = "0.01"\nprise = "1"', "unknown setting 'prise'"),
        ('path = "/a"\nprice = "0.01"\nupstream_authorization = "env:X402MW_NOT_SET_ANYWHERE"', "is not set"),
        ('path = "/a"\nprice = "0.01"\nsign_in = true', "sign_in needs origin"),
        ('path = "/a"\nprice = "0.01"\ndiscovery = {qery = {a = "1"}}', "discovery takes"),
    ],
)
def test_a_bad_route_is_named(route: str, problem: str) -> None:
    problems = _parse(f"[[routes]]\n{route}\n")
    assert any(problem in p for p in problems), problems


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ('method = "GET"\npath = "/items/{id}"', 'method = "GET"\npath = "/items/special"'),
        ('path = "/files/{rest:path}"', 'method = "POST"\npath = "/files/a/b"'),
        ('method = "GET"\npath = "/a"', 'path = "/a"'),
    ],
)
def test_overlapping_patterns_are_refused(first: str, second: str) -> None:
    problems = _parse(f'[[routes]]\n{first}\nprice = "0.01"\n[[routes]]\n{second}\nprice = "0.02"\n')
    assert any("overlap" in p for p in problems), problems


def test_patterns_that_cannot_meet_are_accepted() -> None:
    text = """
[[routes]]
method = "GET"
path = "/items/{id}"
price = "0.01"
[[routes]]
method = "POST"
path = "/items/{id}"
price = "0.02"
[[routes]]
path = "/items/{id}/parts"
price = "0.03"
[[routes]]
path = "/files/{rest:path}"
price = "0.03"
[[routes]]
path = "/files"
price = "0.03"
"""
    assert len(parse_config(tomllib.loads(BASE + text)).routes) == 5


def test_every_problem_is_listed_at_once() -> None:
    problems = _parse(
        'timeout = -1\n[[routes]]\npath = "/a"\nprice = "1"\ncoin = "XYZ"\n[[routes]]\npath = "/b"\nprice = 1.5\n'
    )
    assert len(problems) == 3, problems


def test_a_secret_never_shows_in_a_routes_repr() -> None:
    (route,) = parse_config(
        tomllib.loads(BASE + '[[routes]]\npath = "/a"\nprice = "0.01"\nupstream_authorization = "Bearer s3cret"\n')
    ).routes
    assert route.upstream_authorization == "Bearer s3cret"
    assert "s3cret" not in repr(route)
