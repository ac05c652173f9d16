"""The dashboard's request plumbing: rendering, the session cookie, CSRF, roles, refusals.

Every page handler is wrapped by `page`: it loads the session from the cookie (none, expired or
revoked: a ``GET`` goes to the sign-in page, anything else is refused 403), requires the second factor
when the user has one, checks the CSRF token of every ``POST`` and the role's right to the action;
each refusal is an error page with nothing changed, written to the audit log.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from jinja2 import Environment
from pydantic import ValidationError
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from x402mw.platform.dashboard.assets import asset_digest
from x402mw.platform.http.state import platform_of
from x402mw.platform.http.values import unstorable_field
from x402mw.platform.services import dashboard_users
from x402mw.platform.services.dashboard_users import Session, User
from x402mw.platform.services.merchants import Caller
from x402mw.platform.templates import template_environment
from x402mw.protocol.constant_time import same_secret

if TYPE_CHECKING:
    from x402mw.platform.runtime import Platform

COOKIE = "x402mw_dashboard"
_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": _CSP,
}

Permission = Literal["read", "payments", "developers", "catalog", "team"]
# What each role may do, beyond reading every page of its merchant.
PERMISSIONS: dict[str, frozenset[str]] = {
    "owner": frozenset({"read", "payments", "developers", "catalog", "team"}),
    "developer": frozenset({"read", "developers"}),
    "support": frozenset({"read", "payments"}),
    "viewer": frozenset({"read"}),
}


class PageError(Exception):
    """A refused request: an error page with ``status``, written to the audit log."""

    def __init__(self, status: int, message: str, *, action: str = "refused") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.action = action


@functools.cache
def _environment() -> Environment:
    env = template_environment("x402mw.platform.dashboard")
    env.globals["asset"] = lambda name: f"/dashboard/static/{name}?v={asset_digest(name)}"
    return env


def render(template: str, context: Mapping[str, Any], status: int = 200) -> HTMLResponse:
    html = _environment().get_template(template).render(**context)
    return HTMLResponse(html, status_code=status, headers=_HEADERS)


def address_of(request: Request) -> str:
    return request.client.host if request.client else "unknown"


@dataclass
class Ctx:
    """What a page handler gets: the request, the platform, the session and its form (POST)."""

    request: Request
    platform: Platform
    session: Session
    form: FormData | None

    @property
    def user(self) -> User:
        return self.session.user

    @property
    def merchant_id(self) -> str:
        return self.session.user.merchant_id

    @property
    def livemode(self) -> bool:
        return self.session.livemode

    @property
    def caller(self) -> Caller:
        """The merchant and mode the session acts for, as the API's functions and services take them."""
        return Caller(merchant_id=self.merchant_id, livemode=self.livemode, key_id="dashboard")

    def field(self, name: str, default: str = "") -> str:
        value = self.form.get(name) if self.form is not None else None
        return value.strip() if isinstance(value, str) else default

    def can(self, permission: str) -> bool:
        return permission in PERMISSIONS[self.user.role]

    def page(self, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        return render(template, {**self.base(), **context}, status)

    def base(self) -> dict[str, Any]:
        return {
            "user": self.user,
            "csrf": self.session.csrf_token,
            "livemode": self.livemode,
            "can": self.can,
            # where the mode switch comes back to: a page answered to a form post has no GET of its own
            "path": self.request.url.path if self.request.method == "GET" else "/dashboard/",
            "notice": self.request.query_params.get("notice", "")[:200],
        }

    async def audit(
        self,
        action: str,
        target: str | None = None,
        *,
        outcome: Literal["ok", "refused"] = "ok",
        detail: str | None = None,
    ) -> None:
        await dashboard_users.audit(
            self.platform.engine,
            self.platform.clock.now(),
            action,
            outcome=outcome,
            user=self.user,
            target=target,
            address=address_of(self.request),
            detail=detail,
        )


def error_page(status: int, message: str, ctx: Ctx | None = None) -> HTMLResponse:
    titles = {403: "Not allowed", 404: "Not found", 429: "Too many attempts", 400: "Not accepted"}
    context: dict[str, Any] = ctx.base() if ctx is not None else {"user": None, "csrf": "", "livemode": False}
    context.setdefault("notice", "")
    context.setdefault("path", "")
    context.setdefault("can", lambda _p: False)
    return render("error.html", {**context, "title": titles.get(status, "Error"), "message": message}, status)


def set_session_cookie(request: Request, response: Response, token: str) -> None:
    response.set_cookie(
        COOKIE,
        token,
        max_age=int(dashboard_users.ABSOLUTE.total_seconds()),
        path="/dashboard",
        httponly=True,
        samesite="lax",
        secure=request.url.scheme == "https",
    )


def see(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


Handler = Callable[[Ctx], Awaitable[Response]]


def page(
    permission: Permission = "read", *, two_factor: bool = True
) -> Callable[[Handler], Callable[[Request], Awaitable[Response]]]:
    """Wrap a handler with the session, second-factor, CSRF and role checks (see the module)."""

    def decorate(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        @functools.wraps(handler)
        async def endpoint(request: Request) -> Response:
            platform = platform_of(request)
            now = platform.clock.now()
            session = await dashboard_users.read_session(platform.engine, request.cookies.get(COOKIE, ""), now)
            if session is None:
                if request.method == "GET":
                    return see("/dashboard/sign-in")
                await dashboard_users.audit(
                    platform.engine,
                    now,
                    "session_missing",
                    outcome="refused",
                    address=address_of(request),
                    target=request.url.path,
                )
                return error_page(403, "Your session has ended. Sign in again.")
            form = await request.form() if request.method == "POST" else None
            ctx = Ctx(request, platform, session, form)
            try:
                if two_factor and session.user.totp_enabled and not session.two_factor_passed:
                    if request.method == "GET":
                        return see("/dashboard/sign-in/two-factor")
                    raise PageError(403, "Enter your two-factor code first.", action="two_factor_missing")
                if form is not None:
                    sent = form.get("csrf")
                    if not isinstance(sent, str) or not same_secret(sent, session.csrf_token):
                        raise PageError(
                            403,
                            "This form has expired or was not sent by the dashboard. Reload the page and try again.",
                            action="csrf_refused",
                        )
                if not ctx.can(permission):
                    raise PageError(403, f"Your role ({session.user.role}) does not allow this.", action="role_refused")
                refused = form_refusal(form)
                if refused is not None:
                    raise PageError(400, refused, action="bad_request")
                return await handler(ctx)
            except PageError as refusal:
                await ctx.audit(refusal.action, request.url.path, outcome="refused", detail=refusal.message)
                return error_page(refusal.status, refusal.message, ctx)
            finally:
                if form is not None:
                    await form.close()

        return endpoint

    return decorate


def form_refusal(form: FormData | None) -> str | None:
    """What to say of a form holding a field that no stored text can hold (a NUL character, a lone
    surrogate), or None: such a form is refused whole, before any handler reads it."""
    found = unstorable_field(form.multi_items()) if form is not None else None
    return None if found is None else f"The {found[0]} field contains {found[1]}. Nothing was changed."


def missing(kind: str) -> PageError:
    return PageError(404, f"No such {kind} here.", action="not_found")


def problem(exc: Exception) -> str:
    """What to tell the person about a refused form: a validation error's first problem, or the
    message of the API's or a service's refusal."""
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        return f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
    return str(getattr(exc, "message", exc))
