"""The SMTP transport over the security modes operators configure, against a real SMTP server
(aiosmtpd) with a certificate from a test authority the process trusts (``SSL_CERT_FILE``, which
the default context reads), and a login: STARTTLS on a plain port, implicit TLS, and what a wrong
password or an untrusted certificate does (the send fails, so the outbox tries again later)."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import socket
import ssl
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from x402mw.platform.emails.mailers import SmtpTransport

USER, PASSWORD = "shop@example.com", "s3cret-relay-password"


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A test authority, and a certificate it signed for 127.0.0.1: (authority, certificate, key)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("x402mw test authority"))
        .issuer_name(_name("x402mw test authority"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(_name("127.0.0.1"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = directory / "ca.pem", directory / "server.pem", directory / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


class _Relay:
    """Keeps what it receives, and lets in one user."""

    def __init__(self) -> None:
        self.received: list[tuple[str, list[str], bytes]] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.received.append((envelope.mail_from, list(envelope.rcpt_tos), envelope.content))
        return "250 OK"

    def authenticate(self, server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
        ok = isinstance(data, LoginPassword) and (data.login, data.password) == (USER.encode(), PASSWORD.encode())
        return AuthResult(success=ok, handled=False)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def certificates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path]:
    paths = _certificates(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(paths[0]))  # the process trusts the test authority
    return paths


def _server_context(certificates: tuple[Path, Path, Path]) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificates[1], certificates[2])
    return context


def _serve(relay: _Relay, port: int, **options: Any) -> Iterator[Controller]:
    controller = Controller(relay, hostname="127.0.0.1", port=port, authenticator=relay.authenticate, **options)
    controller.start()
    try:
        yield controller
    finally:
        controller.stop()


def _message() -> EmailMessage:
    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = USER, "buyer@example.org", "Your renewal is due"
    message.set_content("Pay here: https://pay.example/pi_1")
    return message


@pytest.fixture
def starttls_relay(certificates: tuple[Path, Path, Path]) -> Iterator[tuple[_Relay, int]]:
    relay, port = _Relay(), _free_port()
    context = _server_context(certificates)
    for _ in _serve(relay, port, tls_context=context, require_starttls=True, auth_require_tls=True):
        yield relay, port


@pytest.fixture
def tls_relay(certificates: tuple[Path, Path, Path]) -> Iterator[tuple[_Relay, int]]:
    relay, port = _Relay(), _free_port()
    context = _server_context(certificates)
    # The whole connection is TLS; aiosmtpd's auth_require_tls looks for a STARTTLS upgrade only.
    for _ in _serve(relay, port, ssl_context=context, auth_require_tls=False):
        yield relay, port


def test_starttls_with_a_login_delivers(starttls_relay: tuple[_Relay, int]) -> None:
    relay, port = starttls_relay
    asyncio.run(SmtpTransport("127.0.0.1", port, "starttls", USER, PASSWORD).send(_message()))
    [(sender, recipients, content)] = relay.received
    assert (sender, recipients) == (USER, ["buyer@example.org"])
    assert b"Pay here: https://pay.example/pi_1" in content


def test_implicit_tls_with_a_login_delivers(tls_relay: tuple[_Relay, int]) -> None:
    relay, port = tls_relay
    asyncio.run(SmtpTransport("127.0.0.1", port, "tls", USER, PASSWORD).send(_message()))
    assert [recipients for _, recipients, _ in relay.received] == [["buyer@example.org"]]


def test_a_wrong_password_fails_the_send(starttls_relay: tuple[_Relay, int]) -> None:
    relay, port = starttls_relay
    with pytest.raises(Exception, match=r"535|uthentication"):
        asyncio.run(SmtpTransport("127.0.0.1", port, "starttls", USER, "wrong").send(_message()))
    assert relay.received == []


def test_a_certificate_the_process_does_not_trust_fails_the_send(
    starttls_relay: tuple[_Relay, int], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    relay, port = starttls_relay
    other = tmp_path / "other"
    other.mkdir()
    monkeypatch.setenv("SSL_CERT_FILE", str(_certificates(other)[0]))  # another authority
    with pytest.raises(ssl.SSLCertVerificationError):
        asyncio.run(SmtpTransport("127.0.0.1", port, "starttls", USER, PASSWORD).send(_message()))
    assert relay.received == []
