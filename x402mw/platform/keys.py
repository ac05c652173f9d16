"""The platform's own keys (relayer, receipt signer): from settings or environment, else created
once in the data directory with owner-only permissions."""

from __future__ import annotations

import os
from pathlib import Path

from x402mw.evm.keys import new_private_key


def parse_private_key(text: str) -> bytes:
    body = text.strip().removeprefix("0x")
    try:
        key = bytes.fromhex(body)
    except ValueError:
        raise ValueError("a private key must be 32 bytes of hex") from None
    if len(key) != 32:
        raise ValueError("a private key must be 32 bytes of hex")
    return key


def load_or_create_key(given: str | None, path: Path) -> bytes:
    if given:
        return parse_private_key(given)
    if path.exists():
        return parse_private_key(path.read_text())
    path.parent.mkdir(parents=True, exist_ok=True)
    key = new_private_key()
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(key.hex())
    return key
