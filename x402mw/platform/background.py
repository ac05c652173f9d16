"""The platform's background work: one loop that, every two seconds, does each duty the platform's
records call for (finishing settlements, expiring orders, watching deposits, sending refunds,
running subscriptions, sending emails, delivering webhooks, purging idempotency keys).

It sits above every layer it drives (services, emails, webhooks), which is why it is not part of
`Platform` itself: `start_platform` starts a platform and, when its settings ask for it
(``run_worker``), this loop beside it; the platform cancels it when it closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from x402mw import tracing
from x402mw.platform.clock import Clock
from x402mw.platform.runtime import Platform
from x402mw.platform.services.api_requests import purge_api_requests, purge_dashboard_sessions
from x402mw.platform.services.idempotency import purge_idempotency_keys
from x402mw.platform.services.payment_intents import expire_due_payment_intents
from x402mw.platform.services.settlement.payment_identifiers import purge_payment_identifiers
from x402mw.platform.settings import PlatformSettings

logger = logging.getLogger("x402mw.platform")

INTERVAL_SECONDS = 2.0
Duty = tuple[str, Callable[[], Awaitable[object]]]


async def start_platform(settings: PlatformSettings, *, clock: Clock | None = None) -> Platform:
    """`Platform.start`, with the worker running beside it when ``settings.run_worker``."""
    platform = await Platform.start(settings, clock=clock)
    if settings.run_worker:
        platform.run_in_background(run_worker(platform))
    return platform


def duties(platform: Platform) -> list[Duty]:
    """What one pass of the worker does, in order, each named for the logs."""
    return [
        ("finishing settlements", platform.settlement.recovery.finish_left),
        ("purging idempotency keys", lambda: purge_idempotency_keys(platform.engine, platform.clock.now())),
        ("purging payment identifiers", lambda: purge_payment_identifiers(platform.engine, platform.clock.now())),
        ("purging the API request log", lambda: purge_api_requests(platform.engine, platform.clock.now())),
        ("purging dashboard sessions", lambda: purge_dashboard_sessions(platform.engine, platform.clock.now())),
        (
            "expiring payment orders",
            lambda: expire_due_payment_intents(
                platform.engine, platform.clock.now(), platform.payment_intents.checkout_url_base
            ),
        ),
        ("watching deposits", platform.watcher.run_once),
        ("sending refunds", platform.refunds.resume_due),
        ("settling payment channels", platform.channel_worker.run_once),
        ("running subscriptions", platform.renewals.run_due),
        ("sending emails", platform.emails.send_due),
        ("delivering webhooks", platform.webhooks.deliver_due),
    ]


async def run_worker(platform: Platform) -> None:
    """Do every duty, then wait `INTERVAL_SECONDS`, until the platform drains (between two duties) or
    the task is cancelled. One failing duty is logged and does not hold up the others. While tracing
    is on, each duty of each pass is a span (``worker: sending refunds``, say)."""
    work = duties(platform)
    while not platform.draining.is_set():
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(INTERVAL_SECONDS):
                await platform.draining.wait()
        for name, duty in work:
            if platform.draining.is_set():  # the platform is closing: what is left is done by the next process
                return
            try:
                if tracing.enabled:
                    with tracing.span(f"worker: {name}", job=name):
                        await duty()
                else:
                    await duty()
            except Exception:
                logger.exception("worker: %s failed", name)
