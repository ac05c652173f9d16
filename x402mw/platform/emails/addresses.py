"""What may stand in an email's headers: one recipient address, and names cleaned of line breaks.

An address is one RFC 5322 ``addr-spec`` in its dot-atom form, ``local@domain``: the local part
is atoms of ``atext`` (letters, digits and ``!#$%&'*+/=?^_`{|}~-``) joined by single dots; the
domain is a host name as SMTP takes it (RFC 5321): two or more labels of letters, digits and
hyphens, neither starting nor ending with a hyphen. ASCII only. Nothing else is one address: no
display name, angle brackets, comment, group (``team:a@x.test;``), list (``a@x.test,b@y.test``),
quoted local part or white space. The API (``api.fields.Email``), the hosted subscribe form and
the email outbox, for rows written before this rule, all use `is_addr_spec`.
"""

from __future__ import annotations

import re
import unicodedata

_ATEXT = r"A-Za-z0-9!#$%&'*+/=?^_`{|}~-"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
ADDR_SPEC_PATTERN = rf"^[{_ATEXT}]+(?:\.[{_ATEXT}]+)*@{_LABEL}(?:\.{_LABEL})+$"
"""One email address: the dot-atom form of an RFC 5322 addr-spec with a host name for domain."""
_ADDR_SPEC = re.compile(ADDR_SPEC_PATTERN)
MAX_ADDRESS = 320


def is_addr_spec(value: str) -> bool:
    """Whether ``value`` is exactly one address as `ADDR_SPEC_PATTERN` says, of at most 320 characters."""
    return len(value) <= MAX_ADDRESS and _ADDR_SPEC.fullmatch(value) is not None


def header_text(value: str) -> str:
    """``value`` fit for a header such as Subject: every line break (CR, LF, VT, FF, NEL, the file,
    group and record separators, U+2028, U+2029) and every other control character becomes a
    space, and runs of white space one space."""
    cleaned = "".join(" " if unicodedata.category(char) in ("Cc", "Zl", "Zp") else char for char in value)
    return " ".join(cleaned.split())
