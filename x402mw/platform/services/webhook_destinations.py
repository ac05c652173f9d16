"""Where webhooks may go: no way into the platform's own network (SSRF).

A platform that POSTs to URLs its customers choose must not become a way into its own network. A
URL is checked when its endpoint is registered (its text: the scheme, a host name that names no
public host, an address written in the URL) and again before each delivery, after resolving its host,
against every address found (a name can be pointed inside later):

- live mode: ``https`` only, to public addresses only;
- test mode: ``http`` or ``https``; loopback and private addresses (and names such as ``localhost``)
  only where the operator allows them (``PlatformSettings.webhooks_allow_private``, on for the
  embedded default so that a receiver on ``localhost`` can be tried), public addresses otherwise;
- in either mode never a link-local address (``169.254.0.0/16``, where clouds serve instance
  metadata and credentials, and ``fe80::/10``), an unspecified one (``0.0.0.0``, which reaches this
  host, and ``::``), a multicast or broadcast one, nor any of these written as IPv6 (IPv4-mapped
  ``::ffff:169.254.169.254``, NAT64 ``64:ff9b::a9fe:a9fe``) or in inet_aton's shorthand
  (``2852039166``, ``0xa9fea9fe``, ``169.254.43518``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from urllib.parse import urlsplit

_PRIVATE_SUFFIXES = (".localhost", ".local", ".internal", ".lan", ".home.arpa")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_THIS_NETWORK = ipaddress.IPv4Network("0.0.0.0/8")
_BROADCAST = ipaddress.IPv4Address("255.255.255.255")
_INET_ATON = re.compile(r"[0-9a-fx.]+")  # what inet_aton (and so getaddrinfo) reads as an IPv4 address

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _literal(host: str) -> Address | None:
    """The address ``host`` spells, in any form the resolver reads as one; None for a name."""
    try:
        return ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        pass
    if _INET_ATON.fullmatch(host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def _as_ipv4(ip: Address) -> Address:
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip in _NAT64:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


def _never(ip: Address) -> str | None:
    """What kind of address ``ip`` is if no webhook may go to it, whatever the mode and settings."""
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_multicast or ip == _BROADCAST:
        return "a multicast or broadcast address"
    if ip.is_unspecified or (isinstance(ip, ipaddress.IPv4Address) and ip in _THIS_NETWORK):
        return "an unspecified address"
    return None


def _address_reason(host: str, found: Address, *, allow_private: bool) -> str | None:
    ip = _as_ipv4(found)
    shown = str(found) if ip == found else f"{found}, that is {ip}"
    where = f"{host} is" if _literal(host) == found else f"{host} resolves to"
    never = _never(ip)
    if never is not None:
        return f"{where} {never} ({shown}), where no webhook may go"
    if not allow_private and not ip.is_global:
        return f"{where} an address that is not public ({shown})"
    return None


def _port(url: str) -> int | None:
    parts = urlsplit(url)
    try:
        return parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None


def blocked_reason(url: str, *, livemode: bool, allow_private: bool = False) -> str | None:
    """Why the platform must not deliver to ``url`` (from its text alone), or None.

    ``allow_private``: test mode may reach loopback and private addresses (ignored in live mode)."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower().rstrip(".")
    private = allow_private and not livemode
    if livemode and parts.scheme != "https":
        return "live webhook endpoints must use https"
    if _port(url) is None:
        return "the port is not a number from 0 to 65535"
    ip = _literal(host)
    if ip is not None:
        return _address_reason(host, ip, allow_private=private)
    if not private and (
        host == "localhost" or host.endswith(_PRIVATE_SUFFIXES) or ("." not in host and ":" not in host)
    ):
        return f"{host} is not a public host name"
    return None  # a name, checked again when it is resolved


async def resolved_blocked_reason(url: str, *, livemode: bool, allow_private: bool = False) -> str | None:
    """`blocked_reason`, and also every address the URL's host resolves to."""
    reason = blocked_reason(url, livemode=livemode, allow_private=allow_private)
    if reason is not None:
        return reason
    host = urlsplit(url).hostname or ""
    try:
        found = await asyncio.get_running_loop().getaddrinfo(host, _port(url), type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return None  # unresolvable: the delivery fails as a connection error and is retried
    private = allow_private and not livemode
    for _family, _type, _proto, _name, sockaddr in found:
        reason = _address_reason(host, ipaddress.ip_address(str(sockaddr[0]).split("%")[0]), allow_private=private)
        if reason is not None:
            return reason
    return None
