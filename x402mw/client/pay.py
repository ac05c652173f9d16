"""``x402mw pay URL``: fetch a URL, paying its x402 402 answer within a cap.

With ``--max-deposit`` it pays ``batch-settlement`` routes by payment channel: the first time, a
deposit (at most that much) and a voucher; then a voucher a call, the same wallet finding its
channel again through the seller's corrective 402. It shows the channel's balance and charges.

The key comes from ``--private-key-file`` or the ``X402MW_PRIVATE_KEY`` environment variable, never
from the command line (where other users could read it). The exit status is 0 on success, 1 on a
refusal, an HTTP status of 400 or more, or a transport error.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, NoReturn

import click
import httpx

from x402mw.client.auth import X402Auth
from x402mw.client.channels import ChannelPolicy
from x402mw.client.records import PaymentRecord
from x402mw.client.wallet import DEFAULT_KEY_VARIABLE, Wallet
from x402mw.errors import X402Error
from x402mw.protocol.prices import format_amount

BODY_LIMIT = 2000


def _payment_data(record: PaymentRecord | None, checked: bool) -> dict[str, Any] | None:
    if record is None:
        return None
    ceiling = None if record.ceiling is None else format_amount(record.ceiling, record.decimals)
    return {
        "scheme": record.scheme,
        "amount": format_amount(record.amount, record.decimals),
        "atomicAmount": str(record.amount),
        "maxAmount": ceiling,  # upto: the most signed for; amount is what was charged
        "atomicMaxAmount": None if record.ceiling is None else str(record.ceiling),
        "asset": record.symbol or record.asset,
        "network": record.network,
        "payTo": record.pay_to,
        "payer": record.payer,
        "transaction": record.transaction or None,
        "receipt": dict(record.receipt) if record.receipt is not None else None,
        "receiptVerified": record.verified if checked else None,
        "channel": _channel_data(record),
    }


def _channel_data(record: PaymentRecord) -> dict[str, Any] | None:
    """A channel payment's channel: its id, the deposit this call made, and its balance and charges."""
    channel = record.channel
    if channel is None:
        return None
    return {
        "id": channel.channel_id,
        "deposit": format_amount(channel.deposit, record.decimals),
        "balance": format_amount(channel.balance, record.decimals),
        "charged": format_amount(channel.charged_total, record.decimals),
        "remaining": format_amount(channel.balance - channel.charged_total, record.decimals),
        "atomicBalance": str(channel.balance),
        "atomicCharged": str(channel.charged_total),
    }


def _body(response: httpx.Response) -> tuple[str, int]:
    text = response.text
    return (text, 0) if len(text) <= BODY_LIMIT else (text[:BODY_LIMIT], len(text) - BODY_LIMIT)


def _fail(message: str, as_json: bool, reason: str | None = None, transaction: str | None = None) -> NoReturn:
    if as_json:
        error = {"message": message, "reason": reason, "transaction": transaction}
        click.echo(json.dumps({"error": {k: v for k, v in error.items() if v is not None}}))
    else:
        click.echo(f"Error: {message}", err=True)
    sys.exit(1)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("url")
@click.option("--method", "-X", default="GET", show_default=True, help="HTTP method.")
@click.option("--data", "-d", default=None, help="Request body, sent as is.")
@click.option(
    "--header",
    "-H",
    "headers",
    multiple=True,
    metavar="'NAME: VALUE'",
    help="Extra request header; repeatable.",
)
@click.option(
    "--private-key-file",
    envvar="X402MW_PRIVATE_KEY_FILE",
    type=click.Path(dir_okay=False, path_type=Path),
    help=f"File holding the hex private key [default: the {DEFAULT_KEY_VARIABLE} environment variable].",
)
@click.option(
    "--max-amount",
    envvar="X402MW_MAX_AMOUNT",
    default="0.10",
    show_default=True,
    help="Most this payment may cost, in token units (e.g. USDC).",
)
@click.option(
    "--network",
    "networks",
    envvar="X402MW_NETWORK",
    multiple=True,
    metavar="CAIP2",
    help="Only pay on this network (eip155:<chain id>); repeatable.",
)
@click.option(
    "--receipt-signer",
    envvar="X402MW_RECEIPT_SIGNER",
    metavar="ADDRESS",
    help="The platform's receipt address: refuse an answer whose receipt it did not sign.",
)
@click.option(
    "--max-deposit",
    default=None,
    metavar="AMOUNT",
    help="Pay batch-settlement routes by payment channel, locking at most this much (token units) a deposit.",
)
@click.option("--timeout", default=60.0, show_default=True, type=float, help="Seconds per HTTP request.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def pay_command(
    url: str,
    method: str,
    data: str | None,
    headers: tuple[str, ...],
    private_key_file: Path | None,
    max_amount: str,
    networks: tuple[str, ...],
    receipt_signer: str | None,
    max_deposit: str | None,
    timeout: float,
    as_json: bool,
) -> None:
    """Fetch URL, paying its x402 price (at most --max-amount) from the agent's wallet."""
    extra: dict[str, str] = {}
    for header in headers:
        name, sep, value = header.partition(":")
        if not sep or not name.strip():
            raise click.BadParameter(f"{header!r} is not 'NAME: VALUE'", param_hint="--header")
        extra[name.strip()] = value.strip()
    try:
        wallet = Wallet.from_file(private_key_file) if private_key_file else Wallet.from_env()
        channels = None if max_deposit is None else ChannelPolicy(max_deposit=max_deposit)
        auth = X402Auth(
            wallet, max_amount=max_amount, networks=networks or None, receipt_signer=receipt_signer, channels=channels
        )
    except X402Error as exc:
        _fail(exc.message, as_json, exc.reason)
    try:
        with httpx.Client(auth=auth, timeout=timeout) as client:
            response = client.request(method.upper(), url, content=data, headers=extra)
    except X402Error as exc:
        _fail(exc.message, as_json, exc.reason, exc.transaction)
    except httpx.HTTPError as exc:
        _fail(f"{method.upper()} {url} failed: {exc}", as_json)
    record = auth.payments[-1] if auth.payments else None
    payment = _payment_data(record, receipt_signer is not None)
    body, more = _body(response)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "status": response.status_code,
                    "body": body,
                    "bodyTruncatedChars": more,
                    "payment": payment,
                }
            )
        )
    else:
        click.echo(f"status: {response.status_code} {response.reason_phrase}")
        click.echo(f"body: {body}" + (f"… ({more} more characters)" if more else ""))
        if payment is None:
            click.echo("payment: none")
        else:
            verified = {True: "yes", False: "no", None: "not checked (no --receipt-signer)"}
            click.echo(f"payment: {payment['amount']} {payment['asset']} on {payment['network']}")
            channel = payment["channel"]
            if payment["maxAmount"] is not None:  # a metered route: charged, of the most signed for
                click.echo(f"charged: {payment['amount']} of at most {payment['maxAmount']} {payment['asset']}")
            if channel is not None:
                click.echo(f"channel: {channel['id']}")
                click.echo(
                    f"channel balance: {channel['balance']} {payment['asset']}, charged {channel['charged']} so far, "
                    f"{channel['remaining']} left"
                )
            if channel is not None and not payment["transaction"]:
                click.echo("transaction: none (paid by voucher: the seller claims vouchers in batches)")
            elif channel is not None:
                click.echo(f"deposit: {channel['deposit']} {payment['asset']} (transaction {payment['transaction']})")
            elif payment["transaction"]:
                click.echo(f"transaction: {payment['transaction']}")
            elif payment["atomicAmount"] == "0":  # a metered call that used nothing: nothing moved
                click.echo("transaction: none (nothing was charged, so nothing was sent)")
            else:
                click.echo("transaction: unknown (the seller's answer did not name it)")
            click.echo(f"receipt verified: {verified[payment['receiptVerified']]}")
    if response.status_code >= 400:
        if not as_json:
            click.echo(f"Error: the server answered {response.status_code}", err=True)
        sys.exit(1)
