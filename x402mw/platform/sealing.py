"""Secrets the platform must keep readable (webhook signing secrets) are stored sealed: encrypted and
authenticated with a key that lives outside the database (Fernet: AES-128-CBC with HMAC-SHA256).
A copy of the database alone does not give them away.

Values written before sealing existed (no ``sealed:v1:`` prefix) are read as they are.
"""

from __future__ import annotations

import base64

from cryptography.fernet import Fernet, InvalidToken

_PREFIX = "sealed:v1:"


class SecretBox:
    def __init__(self, key: bytes) -> None:
        if len(key) != 32:
            raise ValueError("the sealing key is 32 bytes")
        self._fernet = Fernet(base64.urlsafe_b64encode(key))

    def __repr__(self) -> str:
        return "SecretBox(<key hidden>)"

    def seal(self, secret: str) -> str:
        return _PREFIX + self._fernet.encrypt(secret.encode()).decode("ascii")

    def open(self, stored: str) -> str:
        """The secret; raises ``ValueError`` if it was sealed with another key or altered."""
        if not stored.startswith(_PREFIX):
            return stored
        try:
            return self._fernet.decrypt(stored[len(_PREFIX) :].encode("ascii")).decode()
        except InvalidToken:
            raise ValueError("this secret was sealed with another key, or altered") from None
