"""Verify EIP-3009 transfer authorizations: ours against eth-account on the same inputs.

Both sides start from the authorization's fields and end with its signer. Ours builds a
:class:`TransferAuthorization` (which checks and encodes them) and calls
:func:`x402mw.evm.eip712.recover_transfer_signer` with a precomputed :class:`TokenDomain`, as
settlement does; the baseline is eth-account's
``Account.recover_message(encode_typed_data(full_message=...))``.
The authorizations come from 64 payers, as agents pay again and again (ours remembers the address
of each public key it recovered). Both sides spend most of their time in the same C library
(libsecp256k1's ``ecdsa_recover``, about 29 µs on this project's machine), which bounds the ratio.
Run with ``ETH_HASH_BACKEND=pysha3 python -m bench.bench_verify [n]``.
"""

from __future__ import annotations

import os

os.environ.setdefault("ETH_HASH_BACKEND", "pysha3")

import random
import sys
import time
from collections.abc import Callable
from typing import Any

from coincurve._libsecp256k1 import ffi, lib
from coincurve.context import GLOBAL_CONTEXT
from eth_account import Account
from eth_account.messages import encode_typed_data

from x402mw.evm.eip712 import (
    TYPED_DATA_TYPES,
    TokenDomain,
    TransferAuthorization,
    random_nonce,
    recover_transfer_signer,
    sign_transfer,
    transfer_digest,
)
from x402mw.evm.keys import address_of, new_private_key

TARGET_SPEEDUP = 5


def typed_data(domain: TokenDomain, auth: TransferAuthorization) -> dict[str, Any]:
    """The eth-account ``full_message`` for ``auth`` under ``domain``."""
    return {
        "types": TYPED_DATA_TYPES,
        "primaryType": "TransferWithAuthorization",
        "domain": {
            "name": domain.name,
            "version": domain.version,
            "chainId": domain.chain_id,
            "verifyingContract": domain.verifying_contract,
        },
        "message": {
            "from": auth.from_address,
            "to": auth.to,
            "value": auth.value,
            "validAfter": auth.valid_after,
            "validBefore": auth.valid_before,
            "nonce": auth.nonce,
        },
    }


def recover_alone(domain: TokenDomain, cases: list[tuple[TransferAuthorization, bytes]]) -> Callable[[], list[str]]:
    """libsecp256k1's ``ecdsa_recover`` by itself, every input parsed beforehand.

    Both sides call it once per authorization, so ``baseline / this`` is the most any code around
    it could reach: the ceiling the bench prints.
    """
    context = GLOBAL_CONTEXT.ctx
    prepared = []
    for auth, signature in cases:
        parsed = ffi.new("secp256k1_ecdsa_recoverable_signature *")
        if not lib.secp256k1_ecdsa_recoverable_signature_parse_compact(
            context, parsed, signature[:64], signature[64] - 27
        ):
            raise AssertionError("a signature does not parse")
        prepared.append((parsed, transfer_digest(domain, auth)))
    point = ffi.new("secp256k1_pubkey *")
    recover = lib.secp256k1_ecdsa_recover

    def body() -> list[str]:
        for parsed, digest in prepared:
            if not recover(context, point, parsed, digest):
                raise AssertionError("no public key recovers")
        return []

    return body


def _timed(body: Callable[[], list[str]]) -> tuple[float, list[str]]:
    started = time.perf_counter()
    result = body()
    return time.perf_counter() - started, result


def run(n: int = 2000) -> dict[str, float]:
    """Time ``n`` verifications each way (best of 3), check they agree and print per-op µs."""
    rng = random.Random(402)
    domain = TokenDomain("USD Coin", "2", 8453, "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913")
    keys = [new_private_key() for _ in range(min(n, 64))]
    cases: list[tuple[TransferAuthorization, bytes]] = []
    for index in range(n):
        key = keys[index % len(keys)]
        auth = TransferAuthorization(
            from_address=address_of(key),
            to="0x" + rng.randbytes(20).hex(),
            value=rng.randrange(1, 10**12),
            valid_after=rng.randrange(0, 2**32),
            valid_before=rng.randrange(2**32, 2**33),
            nonce=random_nonce(),
        )
        cases.append((auth, sign_transfer(key, domain, auth)))
    messages = [typed_data(domain, auth) for auth, _ in cases]

    fields = [
        ((auth.from_address, auth.to, auth.value, auth.valid_after, auth.valid_before, auth.nonce), signature)
        for auth, signature in cases
    ]

    def ours() -> list[str]:
        return [recover_transfer_signer(domain, TransferAuthorization(*wire), signature) for wire, signature in fields]

    def baseline() -> list[str]:
        return [
            Account.recover_message(encode_typed_data(full_message=message), signature=signature)
            for message, (_, signature) in zip(messages, cases, strict=True)
        ]

    # Best of 3, the two interleaved so that both see the same machine (a shared VM drifts).
    alone = recover_alone(domain, cases)
    ours_seconds = baseline_seconds = alone_seconds = float("inf")  # perf_counter seconds, never money
    ours_signers: list[str] = []
    baseline_signers: list[str] = []
    for _ in range(3):
        seconds, ours_signers = _timed(ours)
        ours_seconds = min(ours_seconds, seconds)
        seconds, baseline_signers = _timed(baseline)
        baseline_seconds = min(baseline_seconds, seconds)
        alone_seconds = min(alone_seconds, _timed(alone)[0])
    expected = [auth.from_address for auth, _ in cases]
    if ours_signers != expected or baseline_signers != expected:
        raise AssertionError("ours and eth-account disagree on a recovered signer")

    ours_us = ours_seconds / n * 1e6
    baseline_us = baseline_seconds / n * 1e6
    alone_us = alone_seconds / n * 1e6
    speedup = baseline_us / ours_us
    print(
        f"verify ({n} authorizations from {len(keys)} payers): ours {ours_us:.1f} µs/op, "
        f"eth-account {baseline_us:.1f} µs/op, speedup {speedup:.1f}x (target >= {TARGET_SPEEDUP}x)"
    )
    print(
        f"  libsecp256k1 ecdsa_recover alone (both sides call it once): {alone_us:.1f} µs/op, "
        f"so no code around it can pass {baseline_us / alone_us:.2f}x here; "
        f"ours spends {ours_us - alone_us:.1f} µs/op beyond it"
    )
    return {
        "n": float(n),
        "ours_us": ours_us,
        "eth_account_us": baseline_us,
        "speedup": speedup,
        "recover_alone_us": alone_us,
        "ceiling": baseline_us / alone_us,
    }


if __name__ == "__main__":
    run(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
