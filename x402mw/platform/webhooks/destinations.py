"""Where live webhooks may go: public https URLs only.

A platform that POSTs to URLs its customers choose must not become a way into its own network (SSRF).
In live mode a webhook endpoint must be https and name a public host, checked when the endpoint is
registered and again, after resolving the name, before each delivery (a name can be pointed at
a private address later). Test mode allows any http(s) URL, so that integrations can be tried
against ``localhost``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from urllib.parse import urlsplit

__all__ = ["blocked_reason", "resolved_blocked_reason"]

_PRIVATE_SUFFIXES = (".localhost", ".local", ".internal", ".lan", ".home.arpa")


def _address_reason(host: str, address: str) -> str | None:
    ip = ipaddress.ip_address(address.split("%")[0])
    if not ip.is_global or ip.is_multicast:
        return f"{host} is not a public address ({ip})" if host == address else f"{host} resolves to {ip}"
    return None


def blocked_reason(url: str, *, livemode: bool) -> str | None:
    """Why the platform must not deliver to ``url`` (from its text alone), or None."""
    if not livemode:
        return None
    parts = urlsplit(url)
    host = (parts.hostname or "").lower().rstrip(".")
    if parts.scheme != "https":
        return "live webhook endpoints must use https"
    if host == "localhost" or host.endswith(_PRIVATE_SUFFIXES) or ("." not in host and ":" not in host):
        return f"{host} is not a public host name"
    try:
        return _address_reason(host, host)
    except ValueError:
        return None  # a name, checked again when it is resolved


async def resolved_blocked_reason(url: str, *, livemode: bool) -> str | None:
    """`blocked_reason`, and for a live URL also every address its host resolves to."""
    reason = blocked_reason(url, livemode=livemode)
    if reason is not None or not livemode:
        return reason
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        found = await asyncio.get_running_loop().getaddrinfo(host, parts.port or 443, type=socket.SOCK_STREAM)
    except OSError:
        return None  # unresolvable: the delivery fails as a connection error and is retried
    for _family, _type, _proto, _name, sockaddr in found:
        reason = _address_reason(host, str(sockaddr[0]))
        if reason is not None:
            return reason
    return None
