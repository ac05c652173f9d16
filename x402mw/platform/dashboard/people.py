"""Signing in and out, two-factor, the test/live switch, the team (invitations) and the audit log."""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import replace
from typing import Any
from urllib.parse import quote

from limits import parse
from limits.aio.storage import MemoryStorage
from limits.aio.strategies import MovingWindowRateLimiter
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from x402mw.platform.dashboard.web import (
    COOKIE,
    Ctx,
    PageError,
    address_of,
    error_page,
    form_refusal,
    page,
    render,
    see,
    set_session_cookie,
)
from x402mw.platform.http.state import platform_of
from x402mw.platform.services import dashboard_users
from x402mw.platform.services.dashboard_users import AccountError
from x402mw.protocol.constant_time import same_secret


class SignInLimits:
    """Sign-in attempts, counted per account and per client address with the ``limits`` library's
    moving windows (as the checkout's rate limits are): past either budget, 429."""

    def __init__(self, per_account: str = "10/15 minutes", per_address: str = "100/15 minutes") -> None:
        self._limiter = MovingWindowRateLimiter(MemoryStorage())
        self._account = parse(per_account)
        self._address = parse(per_address)

    async def allow(self, email: str, address: str) -> bool:
        """Whether another attempt may be tried (failed attempts count, `failed`)."""
        account = await self._limiter.test(self._account, "dashboard-sign-in-account", email)
        by_address = await self._limiter.test(self._address, "dashboard-sign-in-address", address)
        return account and by_address

    async def failed(self, email: str, address: str) -> None:
        await self._limiter.hit(self._account, "dashboard-sign-in-account", email)
        await self._limiter.hit(self._address, "dashboard-sign-in-address", address)


def _limits(request: Request) -> SignInLimits:
    state = request.app.state
    if not hasattr(state, "dashboard_sign_in_limits"):
        state.dashboard_sign_in_limits = SignInLimits()
    limits: SignInLimits = state.dashboard_sign_in_limits
    return limits


LIVE_NEEDS_2FA = ("owner", "developer")
"""The roles that turn on two-factor sign-in before they may switch to live mode (they handle keys or money)."""
FORM_COOKIE = "x402mw_dashboard_form"  # the CSRF token of the forms sent before a session exists


def _form_token(request: Request) -> str:
    token = request.cookies.get(FORM_COOKIE, "")
    return token if 20 <= len(token) <= 100 else secrets.token_urlsafe(32)


def _with_form_token(request: Request, response: Response, token: str) -> Response:
    secure = request.url.scheme == "https"
    response.set_cookie(FORM_COOKIE, token, path="/dashboard", httponly=True, samesite="strict", secure=secure)
    return response


async def _form_refused(request: Request, form: Any) -> Response | None:
    """403 when a sign-in or invitation form does not carry the browser's form token."""
    sent, kept = form.get("csrf"), request.cookies.get(FORM_COOKIE, "")
    platform = platform_of(request)
    unstorable = form_refusal(form)
    if unstorable is not None:
        now, address = platform.clock.now(), address_of(request)
        await dashboard_users.audit(
            platform.engine, now, "bad_request", outcome="refused", address=address, detail=unstorable
        )
        return error_page(400, unstorable)
    if isinstance(sent, str) and kept and same_secret(sent, kept):
        return None
    await dashboard_users.audit(
        platform.engine,
        platform.clock.now(),
        "csrf_refused",
        outcome="refused",
        address=address_of(request),
        target=request.url.path,
    )
    return error_page(403, "This form has expired or was not sent by the dashboard. Reload the page and try again.")


def _blank(request: Request, error: str = "", email: str = "", status: int = 200) -> Response:
    token = _form_token(request)
    context = {
        "user": None,
        "csrf": token,
        "error": error,
        "email": email,
        "livemode": False,
        "notice": "",
        "path": "",
        "can": lambda _p: False,
    }
    return _with_form_token(request, render("sign_in.html", context, status), token)


async def sign_in_form(request: Request) -> Response:
    return _blank(request)


async def sign_in(request: Request) -> Response:
    platform = platform_of(request)
    now = platform.clock.now()
    async with request.form() as form:
        refused = await _form_refused(request, form)
        email = str(form.get("email") or "").strip().lower()[:320]
        password = str(form.get("password") or "")
    if refused is not None:
        return refused
    address = address_of(request)
    engine = platform.engine
    found = await dashboard_users.find_user_by_email(engine, email)
    if not await _limits(request).allow(email, address):
        merchant = found[0].merchant_id if found else None
        await dashboard_users.audit(
            engine, now, "sign_in_throttled", outcome="refused", email=email, merchant_id=merchant, address=address
        )
        return _blank(request, "Too many attempts. Wait a few minutes and try again.", email, 429)
    ok = await asyncio.to_thread(dashboard_users.verify_password, found[1] if found else None, password)
    if found is None or not ok:
        await _limits(request).failed(email, address)
        merchant = found[0].merchant_id if found else None
        await dashboard_users.audit(
            engine, now, "sign_in_failed", outcome="refused", email=email, merchant_id=merchant, address=address
        )
        return _blank(request, "That email and password do not match.", email, 403)
    user = found[0]
    token, _csrf = await dashboard_users.open_session(engine, user, now, two_factor_passed=not user.totp_enabled)
    await dashboard_users.audit(engine, now, "sign_in", user=user, address=address)
    response = see("/dashboard/sign-in/two-factor" if user.totp_enabled else "/dashboard/")
    set_session_cookie(request, response, token)
    return response


@page(two_factor=False)
async def two_factor_form(ctx: Ctx) -> Response:
    if ctx.session.two_factor_passed or not ctx.user.totp_enabled:
        return see("/dashboard/")
    return ctx.page("two_factor.html", error="")


@page(two_factor=False)
async def two_factor(ctx: Ctx) -> Response:
    if not ctx.user.totp_enabled or ctx.user.totp_secret is None:
        return see("/dashboard/")
    refused = await _second_factor(ctx, "sign_in")
    if refused is not None:
        return ctx.page("two_factor.html", refused[0], error=refused[1])
    now = ctx.platform.clock.now()
    await dashboard_users.update_session(ctx.platform.engine, ctx.session.id, two_factor_passed=True, last_seen_at=now)
    await ctx.audit("two_factor")
    return see("/dashboard/")


async def _second_factor(ctx: Ctx, purpose: str) -> tuple[int, str] | None:
    """None when the form's ``code`` proves the user's second factor: their current TOTP code (of
    a time step not used before) or one of their recovery codes not used yet (then used up); else
    the refusal's status and message (429 throttled, 403 wrong). Every attempt is audited (its
    target the ``purpose``), and each wrong one counted by the throttle."""
    engine, code = ctx.platform.engine, ctx.field("code")
    key, address = ctx.user.email + "#totp", address_of(ctx.request)
    if not await _limits(ctx.request).allow(key, address):
        await ctx.audit("two_factor_throttled", purpose, outcome="refused")
        return 429, "Too many attempts. Wait a few minutes and try again."
    if ctx.user.totp_secret is not None:
        secret = ctx.platform.secrets.open(ctx.user.totp_secret)
        last = await dashboard_users.totp_last_step(engine, ctx.user.id)
        step = dashboard_users.verify_totp(secret, code, ctx.platform.clock.time(), last)
        if step is not None and await dashboard_users.use_totp_step(engine, ctx.user.id, step):
            return None
    if code and await dashboard_users.use_recovery_code(engine, ctx.user.id, code, ctx.platform.clock.now()):
        await ctx.audit("two_factor_recovery_code_used", purpose)
        return None
    await _limits(ctx.request).failed(key, address)
    await ctx.audit("two_factor_failed", purpose, outcome="refused")
    return 403, "That code is not right. Enter the current one, or a recovery code."


@page(two_factor=False)
async def sign_out(ctx: Ctx) -> Response:
    await dashboard_users.revoke_session(ctx.platform.engine, ctx.session.id, ctx.platform.clock.now())
    await ctx.audit("sign_out")
    response = see("/dashboard/sign-in")
    response.delete_cookie(COOKIE, path="/dashboard")
    return response


@page()
async def switch_mode(ctx: Ctx) -> Response:
    live = ctx.field("mode") == "live"
    if live and ctx.user.role in LIVE_NEEDS_2FA and not ctx.user.totp_enabled:
        raise PageError(
            403,
            "Owners and developers turn on two-factor sign-in (Account) before using live mode.",
            action="live_needs_2fa",
        )
    await dashboard_users.update_session(ctx.platform.engine, ctx.session.id, livemode=live)
    await ctx.audit("switch_mode", "live" if live else "test")
    back = ctx.field("back")
    return see(back if back.startswith("/dashboard/") and "//" not in back else "/dashboard/")


@page()
async def account(ctx: Ctx) -> Response:
    pending = ctx.request.query_params.get("setup") == "1" and not ctx.user.totp_enabled
    secret = None
    if pending and ctx.user.totp_secret is not None:
        secret = ctx.platform.secrets.open(ctx.user.totp_secret)
    return ctx.page("account.html", secret=secret, error="")


@page()
async def account_two_factor(ctx: Ctx) -> Response:
    """``start`` sets two-factor sign-in up (again), ``confirm`` turns it on with a first code (and
    shows the recovery codes, once), ``disable`` turns it off. While it is on, changing it takes
    the second factor itself (a current code or a recovery code), as signing in does."""
    engine, user, now = ctx.platform.engine, ctx.user, ctx.platform.clock.now()
    action = ctx.field("action")
    if action == "confirm" and user.totp_secret is not None and not user.totp_enabled:
        secret = ctx.platform.secrets.open(user.totp_secret)
        step = dashboard_users.verify_totp(secret, ctx.field("code"), ctx.platform.clock.time())
        if step is None:
            await ctx.audit("two_factor_setup_failed", outcome="refused")
            return ctx.page("account.html", 400, secret=secret, error="That code is not right. Enter the current one.")
        await dashboard_users.use_totp_step(engine, user.id, step)
        await dashboard_users.set_totp(engine, user.id, user.totp_secret, True)
        codes = await dashboard_users.new_recovery_codes(engine, user.id, now)
        await dashboard_users.update_session(engine, ctx.session.id, two_factor_passed=True)
        await ctx.audit("two_factor_enabled")
        user = replace(user, totp_enabled=True)
        return ctx.page("account.html", user=user, secret=None, error="", recovery_codes=codes)
    if action not in ("start", "disable") or (action == "disable" and not user.totp_enabled):
        raise PageError(400, "Nothing to do.", action="bad_request")
    if user.totp_enabled:
        refused = await _second_factor(ctx, action)
        if refused is not None:
            return ctx.page("account.html", refused[0], secret=None, error=refused[1])
        await dashboard_users.drop_recovery_codes(engine, user.id)
        if user.role in LIVE_NEEDS_2FA:  # off (or not yet on again): back to test mode
            await dashboard_users.update_session(engine, ctx.session.id, livemode=False)
    if action == "disable":
        await dashboard_users.set_totp(engine, user.id, None, False)
        await ctx.audit("two_factor_disabled")
        return see("/dashboard/account?notice=" + quote("Two-factor sign-in is off."))
    await dashboard_users.set_totp(engine, user.id, ctx.platform.secrets.seal(dashboard_users.new_totp_secret()), False)
    await ctx.audit("two_factor_restarted" if user.totp_enabled else "two_factor_setup_started")
    return see("/dashboard/account?setup=1")


@page()
async def team(ctx: Ctx) -> Response:
    users = await dashboard_users.list_users(ctx.platform.engine, ctx.merchant_id)
    return ctx.page("team.html", users=users, roles=dashboard_users.ROLES, link=None, error="")


@page("team")
async def team_invite(ctx: Ctx) -> Response:
    try:
        token = await dashboard_users.invite(
            ctx.platform.engine, ctx.user, ctx.field("email"), ctx.field("role"), ctx.platform.clock.now()
        )
    except AccountError as exc:
        users = await dashboard_users.list_users(ctx.platform.engine, ctx.merchant_id)
        return ctx.page("team.html", 400, users=users, roles=dashboard_users.ROLES, link=None, error=str(exc))
    await ctx.audit("invite", ctx.field("email"), detail=ctx.field("role"))
    link = f"{ctx.request.base_url}dashboard/invitations/{token}".replace("//dashboard", "/dashboard")
    users = await dashboard_users.list_users(ctx.platform.engine, ctx.merchant_id)
    return ctx.page("team.html", users=users, roles=dashboard_users.ROLES, link=link, error="")


@page("team")
async def team_remove(ctx: Ctx) -> Response:
    user_id = ctx.request.path_params["user_id"]
    if user_id == ctx.user.id:
        raise PageError(400, "You cannot remove yourself.", action="bad_request")
    if not await dashboard_users.remove_user(ctx.platform.engine, ctx.merchant_id, user_id, ctx.platform.clock.now()):
        raise PageError(404, "No such user here.", action="not_found")
    await ctx.audit("remove_user", user_id)
    return see("/dashboard/team?notice=" + quote("Removed."))


def _invitation_page(request: Request, token: str, invitation: Any, error: str = "", status: int = 200) -> Response:
    form_token = _form_token(request)
    context = {
        "user": None,
        "csrf": form_token,
        "livemode": False,
        "notice": "",
        "path": "",
        "can": lambda _p: False,
        "token": token,
        "invitation": invitation,
        "error": error,
    }
    return _with_form_token(request, render("invitation.html", context, status), form_token)


async def invitation_form(request: Request) -> Response:
    platform = platform_of(request)
    token = request.path_params["token"]
    invitation = await dashboard_users.find_invitation(platform.engine, token, platform.clock.now())
    if invitation is None:
        await dashboard_users.audit(
            platform.engine, platform.clock.now(), "invitation_refused", outcome="refused", address=address_of(request)
        )
        return error_page(404, "This invitation is not valid: it was used, it expired, or it never existed.")
    return _invitation_page(request, token, invitation)


async def invitation_accept(request: Request) -> Response:
    platform = platform_of(request)
    now = platform.clock.now()
    token = request.path_params["token"]
    async with request.form() as form:
        refused = await _form_refused(request, form)
        password = str(form.get("password") or "")
    if refused is not None:
        return refused
    try:
        user = await dashboard_users.accept_invitation(platform.engine, token, password, now)
    except AccountError as exc:
        invitation = await dashboard_users.find_invitation(platform.engine, token, now)
        await dashboard_users.audit(
            platform.engine, now, "invitation_refused", outcome="refused", address=address_of(request), detail=str(exc)
        )
        if invitation is None:
            return error_page(404, str(exc))
        return _invitation_page(request, token, invitation, str(exc), 400)
    await dashboard_users.audit(platform.engine, now, "invitation_accepted", user=user, address=address_of(request))
    return see("/dashboard/sign-in")


@page()
async def audit_log(ctx: Ctx) -> Response:
    rows = await dashboard_users.audit_entries(ctx.platform.engine, ctx.merchant_id)
    return ctx.page("audit.html", rows=rows)


routes = [
    Route("/sign-in", sign_in_form, methods=["GET"], include_in_schema=False),
    Route("/sign-in", sign_in, methods=["POST"], include_in_schema=False),
    Route("/sign-in/two-factor", two_factor_form, methods=["GET"], include_in_schema=False),
    Route("/sign-in/two-factor", two_factor, methods=["POST"], include_in_schema=False),
    Route("/sign-out", sign_out, methods=["POST"], include_in_schema=False),
    Route("/mode", switch_mode, methods=["POST"], include_in_schema=False),
    Route("/account", account, methods=["GET"], include_in_schema=False),
    Route("/account/two-factor", account_two_factor, methods=["POST"], include_in_schema=False),
    Route("/team", team, methods=["GET"], include_in_schema=False),
    Route("/team/invitations", team_invite, methods=["POST"], include_in_schema=False),
    Route("/team/{user_id}/remove", team_remove, methods=["POST"], include_in_schema=False),
    Route("/invitations/{token}", invitation_form, methods=["GET"], include_in_schema=False),
    Route("/invitations/{token}", invitation_accept, methods=["POST"], include_in_schema=False),
    Route("/audit", audit_log, methods=["GET"], include_in_schema=False),
]
