"""What each subscriber email says, in plain text and HTML (jinja2 templates in ``templates/``).

Five kinds: ``subscribed`` (a subscription was opened on the hosted subscribe page), ``access`` (its
customer asked the subscribe page for their link), ``invoice_opened`` (a renewal invoice is ready),
``reminder`` (the period ends in a day and the invoice is unpaid) and ``past_due`` (the period ended
unpaid; access ends with the grace period). Each carries the link to the customer's subscription page
and, while an invoice is unpaid, its payment link (the payment order's ``checkoutUrl``). The
subscription page link reaches the customer this way, or through the merchant: never on a page a
visitor reaches without it.

An email that cannot be built is `UnbuildableEmail`, a fact of its notice that no retry changes: a
recipient that is not exactly one address (`addresses.is_addr_spec`; rows written before the API
checked that way), or a header that cannot be written. Names that reach the Subject (the
merchant's, the plan's) are cleaned of line breaks first (`addresses.header_text`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime
from email.errors import MessageError
from email.message import EmailMessage
from email.policy import SMTP
from email.utils import format_datetime

from jinja2 import Environment

from x402mw.platform.emails.addresses import header_text, is_addr_spec
from x402mw.platform.templates import template_environment

__all__ = ["KINDS", "LINK_KINDS", "Notice", "UnbuildableEmail", "compose"]

KINDS = ("subscribed", "access", "invoice_opened", "reminder", "past_due")
LINK_KINDS = ("subscribed", "access")  # sent for the subscription page link, with or without an invoice due


@dataclass(frozen=True)
class Notice:
    """The facts of one email."""

    id: str
    kind: str
    to: str
    merchant: str
    plan: str
    interval: str
    amount: str
    currency: str
    period_end: datetime | None  # the end of the paid period: when the unpaid one would start
    grace_end: datetime | None  # past_due only: when the subscription expires unpaid
    pay_url: str | None  # the open invoice's checkout page
    page_url: str  # the customer's subscription page
    livemode: bool


class UnbuildableEmail(ValueError):
    """The email of a notice cannot be built, on this attempt or any other."""


@functools.cache
def _environment() -> Environment:
    env = template_environment("x402mw.platform.emails", keep_trailing_newline=True)
    env.filters["day"] = lambda value: value.strftime("%-d %B %Y") if value else ""
    return env


def _subject(notice: Notice) -> str:
    what = f"{header_text(notice.merchant)}: {header_text(notice.plan)}"
    if notice.kind == "subscribed":
        return f"{what}: your subscription"
    if notice.kind == "access":
        return f"{what}: the link to your subscription"
    if notice.kind == "invoice_opened":
        return f"{what} renewal: {notice.amount} {notice.currency} to pay"
    if notice.kind == "reminder":
        return f"{what} ends tomorrow unless renewed"
    return f"{what} is past due"


def compose(notice: Notice, sender: str, sent_at: datetime) -> EmailMessage:
    """The email of ``notice`` from ``sender``: a plain text part and an HTML alternative. Its
    Message-ID is the queued email's id, the same on every attempt (receivers drop repeats).
    Raises `UnbuildableEmail` when it cannot be built (a bad ``sender``, the operator's setting,
    raises ``ValueError``: that one is fixed by configuration, and the outbox tries again)."""
    message = EmailMessage()
    message["From"] = sender
    if not is_addr_spec(notice.to):
        raise UnbuildableEmail(f"the recipient {notice.to[:340]!r} is not one email address")
    env = _environment()
    context = {"n": notice, "test": not notice.livemode}
    try:
        message["Subject"] = ("[Test] " if not notice.livemode else "") + _subject(notice)
        message["To"] = notice.to
        message["Date"] = format_datetime(sent_at)
        message["Message-ID"] = f"<{notice.id}@x402mw>"
        message["Auto-Submitted"] = "auto-generated"
        message.set_content(env.get_template("subscription.txt").render(**context))
        message.add_alternative(env.get_template("subscription.html").render(**context), subtype="html")
        message.as_bytes(policy=SMTP)  # what the transport will write: it fails here, not on every retry
    except (ValueError, TypeError, LookupError, MessageError) as exc:
        raise UnbuildableEmail(f"the email cannot be built: {exc}") from exc
    return message
