"""Billing periods (calendar arithmetic from the anchor), what a subscription does next, the signed
customer page links and form tokens, and the email of a notice with the embedded default transport."""

from __future__ import annotations

import asyncio
import email
import logging
import string
import uuid
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from email.policy import default as default_policy
from pathlib import Path

import pytest

from x402mw.errors import ConfigurationError
from x402mw.platform.emails.mailers import FileTransport, SmtpTransport, transport_for
from x402mw.platform.emails.messages import Notice, compose
from x402mw.platform.services.subscriptions.customer_links import FORM_LIFETIME, CustomerLinks
from x402mw.platform.services.subscriptions.periods import add_months, boundary, grace_end, renewal_lead
from x402mw.platform.services.subscriptions.steps import schedule
from x402mw.platform.settings import PlatformSettings


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("anchor", "interval", "ends"),
    [
        # anchored on the 31st: the last day of shorter months, and back to the 31st after them
        (
            "2026-01-31 10:00",
            "monthly",
            ["2026-02-28 10:00", "2026-03-31 10:00", "2026-04-30 10:00", "2026-05-31 10:00"],
        ),
        ("2028-01-31 00:00", "monthly", ["2028-02-29 00:00", "2028-03-31 00:00"]),  # a leap year
        ("2026-01-30 08:15", "monthly", ["2026-02-28 08:15", "2026-03-30 08:15"]),
        ("2026-11-30 23:59", "quarterly", ["2027-02-28 23:59", "2027-05-30 23:59", "2027-08-30 23:59"]),
        ("2028-02-29 12:00", "yearly", ["2029-02-28 12:00", "2030-02-28 12:00"]),
        ("2026-12-28 06:00", "weekly", ["2027-01-04 06:00", "2027-01-11 06:00"]),
    ],
)
def test_periods_follow_the_calendar_from_the_anchor(anchor: str, interval: str, ends: list[str]) -> None:
    assert boundary(at(anchor), interval, 0) == at(anchor)
    assert [boundary(at(anchor), interval, n) for n in range(1, len(ends) + 1)] == [at(end) for end in ends]


def test_a_yearly_plan_anchored_on_29_february_returns_to_it_in_leap_years() -> None:
    assert boundary(at("2028-02-29 12:00"), "yearly", 4) == at("2032-02-29 12:00")
    assert add_months(at("2026-03-31 00:00"), -1) == at("2026-02-28 00:00")


def _sub(**fields: object) -> dict[str, object]:
    base: dict[str, object] = {
        "status": "active",
        "cancel_at_period_end": False,
        "open_invoice_id": None,
        "current_period_end": at("2026-02-28 10:00"),
        "past_due_at": None,
    }
    return base | fields


def test_what_a_subscription_does_next() -> None:
    end = at("2026-02-28 10:00")
    assert renewal_lead("weekly") == timedelta(days=2) and renewal_lead("yearly") == timedelta(days=7)
    assert schedule(_sub(), "monthly", 7, reminded=False) == ("open_renewal", end - timedelta(days=7))
    assert schedule(_sub(), "weekly", 7, reminded=False) == ("open_renewal", end - timedelta(days=2))
    opened = _sub(open_invoice_id="inv")
    assert schedule(opened, "monthly", 7, reminded=False) == ("remind", end - timedelta(days=1))
    assert schedule(opened, "monthly", 7, reminded=True) == ("period_end", end)
    assert schedule(_sub(cancel_at_period_end=True), "monthly", 7, reminded=False) == ("period_end", end)
    late = _sub(status="past_due", past_due_at=end)
    assert schedule(late, "monthly", 3, reminded=True) == ("expire", end + timedelta(days=3))
    reorged = _sub(status="past_due", past_due_at=at("2026-02-20 00:00"))  # before its period ended
    assert schedule(reorged, "monthly", 7, reminded=True) == ("expire", end + timedelta(days=7))
    assert schedule(reorged, "monthly", None, reminded=True) == ("expire", at("2026-02-20 00:00"))
    assert grace_end(None, at("2026-02-20 00:00"), 7) == at("2026-02-27 00:00")
    for status in ("incomplete", "canceled", "expired"):
        assert schedule(_sub(status=status), "monthly", 7, reminded=False) == (None, None)


def test_customer_page_tokens_are_signed_and_bound_to_their_subscription() -> None:
    links = CustomerLinks(b"k" * 32, "https://pay.example/checkout")
    other = CustomerLinks(b"o" * 32, "https://pay.example/checkout")
    sub_id = str(uuid.uuid4())
    token = links.token(sub_id)
    assert len(token) == 43 and links.page_url(sub_id) == f"https://pay.example/checkout/subscriptions/{token}"
    assert links.subscription_of(token) == sub_id
    assert sub_id.replace("-", "") not in token.lower()  # nothing of it is readable as the id
    assert other.subscription_of(token) is None  # another key: nothing
    changed = token[:20] + ("A" if token[20] != "A" else "B") + token[21:]
    alphabet = string.ascii_uppercase + string.ascii_lowercase + string.digits + "-_"
    group = alphabet.index(token[-1]) & ~3  # the last character carries 4 bits and 2 spare ones
    for spare in alphabet[group : group + 4]:  # the same 4 bits: only one spelling is valid
        assert (links.subscription_of(token[:-1] + spare) == sub_id) is (spare == token[-1])
    for wrong in (changed, token[:-2], token + "A", sub_id, "é" * 43, ""):
        assert links.subscription_of(wrong) is None, wrong
    assert "k" * 32 not in repr(links)


def test_form_tokens_are_bound_to_their_purpose_and_time() -> None:
    links = CustomerLinks(b"k" * 32, "https://pay.example/checkout")
    now = at("2026-05-01 12:00")
    token = links.form_token("cancel:1", now)
    assert links.check_form_token("cancel:1", token, now + timedelta(minutes=5))
    assert not links.check_form_token("cancel:2", token, now)
    assert not links.check_form_token("cancel:1", token, now + FORM_LIFETIME + timedelta(seconds=1))
    assert not links.check_form_token("cancel:1", token, now - timedelta(minutes=10))
    stamp, nonce, mac = token.split(".")
    assert not links.check_form_token("cancel:1", f"{int(stamp) + 1}.{nonce}.{mac}", now)
    assert not links.check_form_token("cancel:1", f"{stamp}.{nonce}x.{mac}", now)
    assert links.form_token("cancel:1", now) != token  # a nonce each: two forms rendered at once differ
    for junk in ("", ".", "x.y", "99999999999999.abc", "１２３.x"):
        assert not links.check_form_token("cancel:1", junk, now)


NOTICE = Notice(
    id=str(uuid.uuid4()),
    kind="past_due",
    to="ada@example.com",
    merchant="Acme <Streaming>",
    plan="Pro",
    interval="month",
    amount="9.99",
    currency="USDC",
    period_end=at("2026-02-28 10:00"),
    grace_end=at("2026-03-07 10:00"),
    pay_url="https://pay.example/checkout/pi_1",
    page_url="https://pay.example/checkout/subscriptions/abc",
    livemode=False,
)


def test_an_email_has_a_text_and_an_html_part_with_both_links() -> None:
    message = compose(NOTICE, "Billing <billing@shop.example>", at("2026-02-28 10:01"))
    assert message["Subject"] == "[Test] Acme <Streaming>: Pro is past due"
    assert message["Message-ID"] == f"<{NOTICE.id}@x402mw>"
    text = message.get_body(("plain",))
    html = message.get_body(("html",))
    assert text is not None and html is not None
    for part in (text.get_content(), html.get_content()):
        assert NOTICE.pay_url in part and NOTICE.page_url in part
        assert "7 March 2026" in part
    assert "Acme &lt;Streaming&gt;" in html.get_content()  # escaped in HTML


def test_without_smtp_each_email_is_written_to_the_data_dir(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    transport = transport_for(PlatformSettings(data_dir=tmp_path))
    assert isinstance(transport, FileTransport)
    message = compose(NOTICE, "Billing <billing@shop.example>", at("2026-02-28 10:01"))
    with caplog.at_level(logging.INFO, logger="x402mw.platform.emails"):
        asyncio.run(transport.send(message))
    [written] = list((tmp_path / "emails").iterdir())
    assert written.name == f"{NOTICE.id}.eml"
    read = email.message_from_bytes(written.read_bytes(), policy=default_policy)
    assert isinstance(read, EmailMessage) and read["To"] == "ada@example.com"
    assert any(str(written) in record.getMessage() for record in caplog.records)
    smtp = transport_for(PlatformSettings(data_dir=tmp_path, smtp_host="mail.example", smtp_password="hunter2"))
    assert isinstance(smtp, SmtpTransport) and "hunter2" not in repr(smtp)
    with pytest.raises(ConfigurationError):
        transport_for(PlatformSettings(data_dir=tmp_path, smtp_host="mail.example", smtp_security="ssl"))
