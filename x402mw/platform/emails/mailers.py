"""Where emails go: an SMTP server, or ``.eml`` files in the data dir when none is configured."""

from __future__ import annotations

import asyncio
import logging
import smtplib
import ssl
from email.message import EmailMessage
from pathlib import Path
from typing import Protocol

from x402mw.errors import ConfigurationError
from x402mw.platform.settings import PlatformSettings

logger = logging.getLogger("x402mw.platform.emails")

SECURITY = ("starttls", "tls", "none")
TIMEOUT_SECONDS = 30.0


class EmailTransport(Protocol):
    async def send(self, message: EmailMessage) -> None:
        """Deliver ``message``; raise on failure (the outbox tries again later)."""


class SmtpTransport:
    """Sends over SMTP: ``starttls`` (upgrade a plain connection, port 587), ``tls`` (implicit TLS,
    port 465) or ``none`` (plain, for a relay on the same host); logs in when a username is set.
    Each email opens its own connection, in a thread (smtplib blocks)."""

    def __init__(
        self, host: str, port: int, security: str, username: str | None = None, password: str | None = None
    ) -> None:
        if security not in SECURITY:
            raise ConfigurationError(f"smtp_security must be one of {', '.join(SECURITY)}, not {security!r}")
        self.host, self.port, self.security = host, port, security
        self._username, self._password = username, password

    def __repr__(self) -> str:
        return f"SmtpTransport(host={self.host!r}, port={self.port}, security={self.security!r})"

    async def send(self, message: EmailMessage) -> None:
        await asyncio.to_thread(self._send, message)

    def _send(self, message: EmailMessage) -> None:
        context = ssl.create_default_context()
        smtp: smtplib.SMTP
        if self.security == "tls":
            smtp = smtplib.SMTP_SSL(self.host, self.port, timeout=TIMEOUT_SECONDS, context=context)
        else:
            smtp = smtplib.SMTP(self.host, self.port, timeout=TIMEOUT_SECONDS)
        with smtp:
            if self.security == "starttls":
                smtp.starttls(context=context)
            if self._username:
                smtp.login(self._username, self._password or "")
            smtp.send_message(message)


class FileTransport:
    """The embedded default: writes each email to ``<directory>/<id>.eml`` and logs a line."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def __repr__(self) -> str:
        return f"FileTransport({str(self.directory)!r})"

    async def send(self, message: EmailMessage) -> None:
        name = str(message["Message-ID"]).strip("<>").split("@")[0] + ".eml"
        path = self.directory / name
        await asyncio.to_thread(self._write, path, message.as_bytes())
        logger.info("email to %s (%s) written to %s", message["To"], message["Subject"], path)

    def _write(self, path: Path, data: bytes) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".part")
        partial.write_bytes(data)
        partial.replace(path)  # whole or not at all


def transport_for(settings: PlatformSettings) -> EmailTransport:
    """SMTP when ``smtp_host`` is set, else ``.eml`` files under ``<data_dir>/emails``."""
    if settings.smtp_host:
        return SmtpTransport(
            settings.smtp_host,
            settings.smtp_port,
            settings.smtp_security,
            settings.smtp_username,
            settings.smtp_password.get_secret_value() if settings.smtp_password is not None else None,
        )
    return FileTransport(settings.data_dir / "emails")
