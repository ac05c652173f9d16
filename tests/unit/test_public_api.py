"""The public surface is small and deliberate: changing it must be a conscious edit of this file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import x402mw
import x402mw.client
import x402mw.evm
import x402mw.protocol
import x402mw.seller

PINNED = {
    x402mw: [
        "ConfigurationError",
        "InvalidPaymentError",
        "MeteredPayment",
        "PaidRoute",
        "PaymentError",
        "PaymentGate",
        "PaymentRefusedError",
        "PlatformError",
        "PriceError",
        "Settlement",
        "UsageError",
        "X402Error",
        "__version__",
    ],
    x402mw.client: [
        "APIConnectionError",
        "APIError",
        "AsyncMerchantClient",
        "AuthenticationError",
        "ChannelCharge",
        "ChannelPolicy",
        "ChannelRefund",
        "ConflictError",
        "IdempotencyError",
        "InvalidRequestError",
        "MerchantClient",
        "NotFoundError",
        "PaymentRecord",
        "RateLimitError",
        "ServerError",
        "UnprocessableEntityError",
        "Wallet",
        "X402Auth",
    ],
}


@pytest.mark.parametrize("module", list(PINNED), ids=lambda m: m.__name__)
def test_exports_are_pinned(module: object) -> None:
    assert sorted(module.__all__) == sorted(PINNED[module])  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "module", [x402mw, x402mw.client, x402mw.evm, x402mw.protocol, x402mw.seller], ids=lambda m: m.__name__
)
def test_every_export_exists(module: object) -> None:
    for name in module.__all__:  # type: ignore[attr-defined]
        assert hasattr(module, name), name


@pytest.mark.parametrize(
    "path", sorted(Path(__file__).parents[2].joinpath("examples").glob("*.py")), ids=lambda p: p.name
)
def test_examples_import(path: Path) -> None:
    """Each example imports cleanly in a fresh interpreter (each may configure its framework globally)."""
    env = dict(
        os.environ,
        X402MW_API_KEY="sk_test_example",
        X402MW_ENDPOINT_ID="0" * 8,
        PYTHONPATH=os.pathsep.join([str(path.parent), str(path.parents[1])]),
    )
    done = subprocess.run(
        [sys.executable, "-c", f"import {path.stem}"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]


PUBLIC_MODULES = {
    # the package's public surfaces (pinned above) and the modules users import by name
    "x402mw",
    "x402mw.errors",
    "x402mw.client",
    "x402mw.client.merchant",
    "x402mw.client.mcp",
    "x402mw.client.webhooks",
    "x402mw.evm",
    "x402mw.protocol",
    "x402mw.seller",
    "x402mw.adapters.asgi",
    "x402mw.adapters.django",
    "x402mw.adapters.flask",
    "x402mw.adapters.mcp",
    "x402mw.adapters.starlette",
    "x402mw.adapters.wsgi",
    # entry points: the CLI, the demo, the platform's server, app and settings
    "x402mw.cli",
    "x402mw.demo",
    "x402mw.platform.server",
    "x402mw.platform.app",
    "x402mw.platform.settings",
    # package facades inside the platform: what the app mounts from them
    "x402mw.platform.checkout",
    "x402mw.platform.dashboard",
    "x402mw.platform.webhooks",
}


def test_only_public_modules_declare_all() -> None:
    """Internal modules declare no ``__all__`` (as Starlette's): what a module exports is what the
    package's public surfaces above list, and a name is imported from the module that defines it."""
    root = Path(x402mw.__file__).parent
    declaring = set()
    for path in root.rglob("*.py"):
        if "migrations" in path.parts:
            continue
        if any(line.startswith("__all__") for line in path.read_text().splitlines()):
            parts = path.relative_to(root.parent).with_suffix("").parts
            declaring.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    assert declaring == PUBLIC_MODULES
