"""Two-factor sign-in in the dashboard, on SQLite: while it is on, turning it off or
setting it up again takes the second factor itself (a current code or a recovery code), every
change is in the audit log, recovery codes sign in once each, and developers, as owners, turn it
on before live mode."""

from __future__ import annotations

import re
from typing import Any

import pytest
from sqlalchemy import select

from tests.dashboard_fixtures import PASSWORD, Team, audited, csrf_of, enable_two_factor, make_team, post_sign_in
from tests.harness import PlatformHarness
from x402mw.platform.db import tables
from x402mw.platform.services import dashboard_users as accounts


@pytest.fixture
def team(dev_platform: PlatformHarness) -> Team:
    return make_team(dev_platform)


def _totp(team: Team, role: str) -> tuple[bool, str | None]:
    users, user_id = tables.dashboard_users, team.users[role].id

    async def read(p: Any) -> Any:
        async with p.engine.connect() as conn:
            return (await conn.execute(select(users).where(users.c.id == user_id))).one()

    row = team.harness.server.call(read)
    return bool(row.totp_enabled), row.totp_secret


def _account_form(client: Any, action: str, code: str | None = None) -> Any:
    data = {"csrf": csrf_of(client.get("/dashboard/account").text), "action": action}
    return client.post("/dashboard/account/two-factor", data=data | ({"code": code} if code is not None else {}))


@pytest.mark.parametrize("action", ["start", "disable"])
def test_two_factor_is_not_turned_off_without_a_code(team: Team, action: str) -> None:
    with team.sign_in("owner") as client:
        secret, step, _codes = enable_two_factor(client)
        before = _totp(team, "owner")
        for code in (None, "", "000000" if accounts.totp_code(secret, step + 1) != "000000" else "111111", "١٢٣٤٥٦"):
            refused = _account_form(client, action, code)
            assert refused.status_code == 403, (code, refused.status_code)
            assert "not right" in refused.text
        assert _totp(team, "owner") == before  # still on, with the same secret
        assert len(audited(team, "two_factor_failed")) == 4
    with team.browser() as client:  # the next sign-in still asks for the second factor
        assert post_sign_in(client, team.users["owner"].email, PASSWORD).headers["location"].endswith("/two-factor")
        assert client.get("/dashboard/payments").headers["location"] == "/dashboard/sign-in/two-factor"


def test_turning_two_factor_off_and_on_again_is_audited(team: Team) -> None:
    with team.sign_in("owner") as client:
        secret, step, _codes = enable_two_factor(client)
        assert [r.outcome for r in audited(team, "two_factor_setup_started")] == ["ok"]
        assert [r.outcome for r in audited(team, "two_factor_enabled")] == ["ok"]
        off = _account_form(client, "disable", accounts.totp_code(secret, step + 1))
        assert off.status_code == 303, off.text
        assert _totp(team, "owner") == (False, None)
        assert [r.outcome for r in audited(team, "two_factor_disabled")] == ["ok"]
        replayed = _account_form(client, "disable", accounts.totp_code(secret, step + 1))
        assert replayed.status_code == 400  # off already: nothing to do
    with team.browser() as client:  # off: the next sign-in goes straight in
        assert post_sign_in(client, team.users["owner"].email, PASSWORD).headers["location"] == "/dashboard/"


def test_setting_up_again_takes_a_code_and_is_audited(team: Team) -> None:
    with team.sign_in("owner") as client:
        secret, step, _codes = enable_two_factor(client)
        again = _account_form(client, "start", accounts.totp_code(secret, step + 1))
        assert again.status_code == 303 and again.headers["location"] == "/dashboard/account?setup=1"
        enabled, sealed = _totp(team, "owner")
        assert not enabled and sealed is not None
        assert [r.outcome for r in audited(team, "two_factor_restarted")] == ["ok"]
        fresh = re.search(r'id="totp-secret">([A-Z2-7]+)<', client.get("/dashboard/account?setup=1").text)
        assert fresh is not None and fresh.group(1) != secret


def test_recovery_codes_sign_in_once_each_and_turn_two_factor_off(team: Team) -> None:
    with team.sign_in("owner") as client:
        _secret, _step, codes = enable_two_factor(client)
    assert len(codes) == accounts.RECOVERY_CODES and len(set(codes)) == len(codes)
    with team.browser() as client:
        post_sign_in(client, team.users["owner"].email, PASSWORD)
        form = client.get("/dashboard/sign-in/two-factor").text
        ok = client.post("/dashboard/sign-in/two-factor", data={"csrf": csrf_of(form), "code": codes[0].upper()})
        assert ok.status_code == 303 and ok.headers["location"] == "/dashboard/"
        assert [r.target for r in audited(team, "two_factor_recovery_code_used")] == ["sign_in"]
        off = _account_form(client, "disable", codes[1])
        assert off.status_code == 303
        assert [r.target for r in audited(team, "two_factor_recovery_code_used")] == ["sign_in", "disable"]
    with team.sign_in("owner") as client:  # off, and its codes with it: they turn on nothing again
        enable_two_factor(client)
    with team.browser() as client:
        post_sign_in(client, team.users["owner"].email, PASSWORD)
        form = client.get("/dashboard/sign-in/two-factor").text
        for used in (codes[0], codes[2]):
            refused = client.post("/dashboard/sign-in/two-factor", data={"csrf": csrf_of(form), "code": used})
            assert refused.status_code == 403


@pytest.mark.parametrize("code", ["١٢٣٤٥٦", "１１１１１１", "²²²²²²"])
def test_a_code_in_other_characters_is_a_wrong_code(team: Team, code: str) -> None:
    with team.sign_in("owner") as client:
        enable_two_factor(client)
    with team.browser() as client:
        post_sign_in(client, team.users["owner"].email, PASSWORD)
        form = client.get("/dashboard/sign-in/two-factor").text
        refused = client.post("/dashboard/sign-in/two-factor", data={"csrf": csrf_of(form), "code": code})
        assert refused.status_code == 403 and "not right" in refused.text
        assert client.get("/dashboard/payments").status_code == 303  # still not past the second factor


def test_developers_turn_on_two_factor_before_live_mode(team: Team) -> None:
    with team.sign_in("developer") as client:
        home = client.get("/dashboard/")
        refused = client.post("/dashboard/mode", data={"csrf": csrf_of(home.text), "mode": "live"})
        assert refused.status_code == 403 and "two-factor" in refused.text
        assert [r.outcome for r in audited(team, "live_needs_2fa")] == ["refused"]
        secret, step, _codes = enable_two_factor(client)
        live = client.post("/dashboard/mode", data={"csrf": csrf_of(home.text), "mode": "live"})
        assert live.status_code == 303 and "Live mode" in client.get("/dashboard/payments").text
        # turned off again: back in test mode, and live mode refused until it is on
        assert _account_form(client, "disable", accounts.totp_code(secret, step + 1)).status_code == 303
        assert "Live mode" not in client.get("/dashboard/payments").text
        again = client.post("/dashboard/mode", data={"csrf": csrf_of(home.text), "mode": "live"})
        assert again.status_code == 403
