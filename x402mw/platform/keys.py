"""The platform's own keys (relayer, receipt signer): from settings or environment, else created
once in the data directory with owner-only permissions.

The data directory is made owner-only, with a ``.gitignore`` of ``*`` inside, so that a platform
run from a repository's work tree (the default data dir is ``.x402mw`` in the current directory)
does not have its keys committed by a ``git add -A``; ``x402mw platform serve`` warns when the data
dir is inside a git work tree (`git_work_tree`). A key file is written whole before it appears
under its name, readable by its owner only from the start: never a moment with other permissions,
nor a half-written key another process could read.
"""

from __future__ import annotations

import contextlib
import os
import secrets
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


def prepare_data_dir(path: Path) -> None:
    """Create the data directory ``path`` if it is not there: owner-only (``0700``), with a
    ``.gitignore`` that ignores everything in it. An existing directory is left as it is."""
    if path.is_dir():
        return
    try:
        path.mkdir(parents=True, mode=0o700)
    except FileExistsError:  # made by another process meanwhile
        return
    _create_private(path / ".gitignore", "# the platform's keys and state: never commit them\n*\n")


def git_work_tree(path: Path) -> Path | None:
    """The git work tree ``path`` is inside (the nearest directory holding ``.git``), or None."""
    for directory in (path.resolve(), *path.resolve().parents):
        if (directory / ".git").exists():
            return directory
    return None


def load_or_create_key(given: str | None, path: Path) -> bytes:
    if given:
        return parse_private_key(given)
    if not path.exists():
        prepare_data_dir(path.parent)
        _create_private(path, new_private_key().hex())
    return parse_private_key(path.read_text())


def _create_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, mode ``0600`` from its creation, unless ``path`` exists (then it
    is kept: another process created it first). The text goes to a temporary file made with
    ``O_CREAT | O_EXCL`` and that mode, then is linked under its name, so that whoever reads
    ``path`` reads it whole."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.partial")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        with contextlib.suppress(FileExistsError):  # created meanwhile by another process: theirs stands
            os.link(partial, path)
    finally:
        partial.unlink(missing_ok=True)
