"""Odd input to the dashboard, on SQLite and PostgreSQL: filters and form fields that Python's own
readers take wrongly (digits of other scripts, ``²``, numbers past any column, days with no next
day, NUL) are refused with the dashboard's own 400 page or form error, never a 500; a CSRF token in
other characters is a wrong token."""

from __future__ import annotations

import pytest

from tests.dashboard_fixtures import PASSWORD, Team, audited, csrf_of, make_team
from tests.harness import PlatformHarness

pytestmark = pytest.mark.both_databases  # NUL and numbers past a column: PostgreSQL refuses what SQLite stores


@pytest.fixture
def team(dev_platform: PlatformHarness) -> Team:
    return make_team(dev_platform)


@pytest.mark.parametrize(
    "query",
    [
        "until=9999-12-31",
        "since=9999-12-31",
        "until=２０２６-01-01",
        "since=2026-02-30",
        "network=99999999999999999999999",
        "network=²",
        "network=١٢",
        "network=-1",
        "after=9999-12-31T23:59:59-01:00_" + "0" * 8 + "-0000-0000-0000-" + "0" * 12,
        "after=2026-01-01T00:00:00_x",
        "after=٢٠٢٦-01-01T00:00:00+00:00_x",
    ],
)
def test_a_filter_the_payments_page_cannot_use_is_a_400(team: Team, query: str) -> None:
    order = team.order()
    with team.sign_in("viewer") as client:
        refused = client.get(f"/dashboard/payments?{query}")
        assert refused.status_code == 400, (query, refused.status_code)
        assert "filter is not one this page can use" in refused.text
        # the filters it can use, to the last day that has a next one, still filter
        network = team.harness.network.removeprefix("eip155:")
        shown = client.get(f"/dashboard/payments?network={network}&since=0001-01-01&until=9998-12-31")
        assert shown.status_code == 200 and order["orderId"] in shown.text
        other = client.get("/dashboard/payments?network=1&since=2000-01-01")
        assert other.status_code == 200 and order["orderId"] not in other.text
    assert [r.outcome for r in audited(team, "bad_request")] == ["refused"]


@pytest.mark.parametrize("grace", ["²", "١٢", "１", "-1", "3.5"])
def test_a_plans_grace_days_that_is_no_number_is_a_form_error(team: Team, grace: str) -> None:
    with team.sign_in("owner") as client:
        csrf = csrf_of(client.get("/dashboard/plans").text)
        form = {"csrf": csrf, "name": "Club", "amount": "5", "currency": "USDC", "interval": "monthly"}
        refused = client.post("/dashboard/plans", data=form | {"grace_days": grace})
        assert refused.status_code == 400, (grace, refused.status_code)
        assert "graceDays" in refused.text and 'role="alert"' in refused.text
        made = client.post("/dashboard/plans", data=form | {"grace_days": "0"})
        assert made.status_code == 303, made.text


@pytest.mark.parametrize(
    ("path", "fields"),
    [
        ("/dashboard/agents", {"name": "Weather\x00", "resource_url": "https://api.example.com/w"}),
        ("/dashboard/team/invitations", {"email": "new\x00@shop.test", "role": "viewer"}),
        ("/dashboard/plans", {"name": "Club", "amount": "5", "currency": "USDC", "interval": "monthly", "\x00": "x"}),
    ],
)
def test_a_nul_in_a_form_field_is_refused_before_anything_reads_it(
    team: Team, path: str, fields: dict[str, str]
) -> None:
    with team.sign_in("owner") as client:
        csrf = csrf_of(client.get("/dashboard/").text)
        refused = client.post(path, data={"csrf": csrf, **fields})
        assert refused.status_code == 400, refused.text
        assert "contains a NUL character" in refused.text
    assert [r.outcome for r in audited(team, "bad_request")] == ["refused"]


@pytest.mark.parametrize("field", ["email", "password"])
def test_a_nul_in_the_sign_in_form_is_refused(team: Team, field: str) -> None:
    with team.browser() as client:
        csrf = csrf_of(client.get("/dashboard/sign-in").text)
        form = {"csrf": csrf, "email": team.users["owner"].email, "password": PASSWORD}
        refused = client.post("/dashboard/sign-in", data=form | {field: form[field] + "\x00"})
        assert refused.status_code == 400 and "NUL" in refused.text


@pytest.mark.parametrize("token", ["é" * 43, "\u2028" * 43, "ａ" * 43], ids=["latin", "separator", "fullwidth"])
def test_a_csrf_token_in_other_characters_is_a_wrong_token(team: Team, token: str) -> None:
    with team.browser() as client:  # signing in: no session yet
        client.get("/dashboard/sign-in")
        form = {"csrf": token, "email": team.users["owner"].email, "password": PASSWORD}
        assert client.post("/dashboard/sign-in", data=form).status_code == 403
    with team.sign_in("owner") as client:  # a form of a session
        assert client.post("/dashboard/mode", data={"csrf": token, "mode": "test"}).status_code == 403
    assert len(audited(team, "csrf_refused")) == 1  # the session's (a refusal before sign-in names no merchant)
