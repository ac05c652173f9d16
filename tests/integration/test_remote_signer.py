"""Keys outside the process (issue 38): ``x402mw platform serve`` whose relayer key is held by a
remote signer (``X402MW_RELAYER_SIGNER_URL``, a process of ours speaking web3signer's eth1 API,
`tests.remote_signer`). The remote signer settles payments; while it is down a payment stays
pending, never failed, and ``/readyz`` says why; once it is back the payment is settled."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.harness import Serve, serving
from tests.remote_signer import RemoteSignerProcess, remote_signer
from tests.sellers import asgi_transport, starlette_app
from tests.waiting import eventually
from x402mw.client import Wallet, X402Auth
from x402mw.evm.keys import address_of, new_private_key
from x402mw.platform.chain.devchain import DEV_CHAIN_ID
from x402mw.platform.chain.signers import RemoteSigner, SignerUnavailable
from x402mw.platform.chain.transactions import Fees, TransactionSigner
from x402mw.platform.server import free_port

pytestmark = pytest.mark.anyio
NETWORK = f"eip155:{DEV_CHAIN_ID}"
SIGNER_CHECK = f"relayer signer {NETWORK}"


class Signed:
    """A serve whose relayer signs through ``signer``, with a merchant and an agent endpoint."""

    def __init__(self, serve: Serve, signer: RemoteSignerProcess) -> None:
        self.serve, self.signer = serve, signer
        self.root = serve.url.removesuffix("/v1")
        merchant = serve.cli("merchants", "create", "--name", "Signed Co")
        self.api_key = serve.cli("keys", "create", "--merchant", merchant["id"])["key"]
        with self.api() as api:
            reply = api.post(
                "/agent/endpoints",
                json={
                    "name": "Weather",
                    "resourceUrl": "http://127.0.0.1/weather",
                    "chainId": DEV_CHAIN_ID,
                    "currency": "USDC",
                    "payoutAddress": address_of(new_private_key()),
                    "pricingMode": "fixed",
                    "amountMinor": "10000",
                },
            )
            assert reply.status_code == 201, reply.text
            self.endpoint = reply.json()["endpoint"]["id"]

    def api(self) -> httpx.Client:
        return httpx.Client(base_url=self.serve.url, headers={"Authorization": f"Bearer {self.api_key}"}, timeout=60)

    def agent(self) -> X402Auth:
        key = new_private_key()
        body = {"network": NETWORK, "currency": "USDC", "address": address_of(key), "amount": "1"}
        with self.api() as api:
            assert api.post("/sandbox/faucet", json=body).status_code == 200
        return X402Auth(Wallet("0x" + key.hex()))

    def payments(self) -> list[dict[str, Any]]:
        with self.api() as api:
            reply = api.get("/agent/payments", params={"endpointId": self.endpoint})
        assert reply.status_code == 200, reply.text
        return list(reply.json()["data"])

    def readyz(self) -> httpx.Response:
        return httpx.get(self.root + "/readyz", timeout=30)


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Signed]:
    key, port = new_private_key(), free_port()
    environment = {
        "X402MW_RELAYER_SIGNER_URL": f"http://127.0.0.1:{port}",
        "X402MW_RELAYER_SIGNER_ADDRESS": address_of(key),
        "X402MW_TAKEOVER_SECONDS": "2",  # a payment left pending is sent again by the worker this soon
    }
    data_dir = tmp_path_factory.mktemp("signer") / "data"
    with remote_signer(port, key) as signer, serving(data_dir, **environment) as serve:
        assert not (serve.data_dir / "relayer.key").exists(), "no relayer key in the process's data dir"
        yield Signed(serve, signer)


async def _pay(signed: Signed, auth: X402Auth) -> httpx.Response:
    app = starlette_app(signed.api_key, signed.serve.url, signed.endpoint, settle_timeout=8)
    async with httpx.AsyncClient(transport=asgi_transport(app), base_url="http://seller", auth=auth) as client:
        return await client.get("/weather", timeout=60)


async def test_the_remote_signer_settles_payments(signed: Signed) -> None:
    before = signed.signer.signed()
    paid = await _pay(signed, signed.agent())
    assert paid.status_code == 200, paid.text
    assert signed.signer.signed() == before + 1, "the transfer was signed by the remote signer"
    assert [p["transaction"] for p in signed.payments() if p["status"] == "settled"].count(paid.json()["tx"]) == 1
    ready = signed.readyz()
    assert ready.status_code == 200, ready.text
    assert ready.json()["checks"][SIGNER_CHECK]["ok"] is True


async def test_its_outage_leaves_a_payment_pending_and_readyz_says_why(signed: Signed) -> None:
    earlier = {p["id"] for p in signed.payments()}
    agent = signed.agent()
    signed.signer.stop()
    try:
        # answered pending (402 settlement_pending), or, to the agent's retries of it while the
        # signer is still away, 503 "retry with the same payment": never a refusal
        pending = await _pay(signed, agent)
        assert pending.status_code in (402, 503), pending.text
        if pending.status_code == 402:
            assert "settlement_pending" in base64.b64decode(pending.headers["payment-response"]).decode()
        assert [p["status"] for p in signed.payments() if p["id"] not in earlier] == ["claimed"], "pending"
        answer = eventually(
            signed.readyz,
            until=lambda r: r.status_code == 503,
            what=lambda: f"/readyz to fail on the signer: {signed.readyz().text}",
        )
        checks = answer.json()["checks"]
        assert [name for name, check in checks.items() if not check["ok"]] == [SIGNER_CHECK]
        assert "cannot be reached" in checks[SIGNER_CHECK]["detail"]
        assert "pending" in checks[SIGNER_CHECK]["detail"]
    finally:
        signed.signer.start()
    # back: ready again; the worker sends the payment left pending, and the agent's retry is answered with it
    eventually(lambda: signed.readyz().status_code == 200, what=lambda: signed.readyz().text)
    new = eventually(
        lambda: [p for p in signed.payments() if p["id"] not in earlier],
        until=lambda payments: payments and all(p["status"] in ("settled", "failed") for p in payments),
        what=lambda: f"the payment left pending to be settled: {signed.payments()}",
    )
    assert [p["status"] for p in new] == ["settled"], new
    again = await _pay(signed, agent)
    assert again.status_code == 200, again.text
    assert again.json()["tx"] == new[0]["transaction"]
    assert len([p for p in signed.payments() if p["id"] not in earlier]) == 1, "paid once"


async def test_a_remote_signer_signs_what_the_key_would_and_nothing_for_another(signed: Signed) -> None:
    key = signed.signer.key
    local = TransactionSigner(key, chain_id=DEV_CHAIN_ID)
    remote = TransactionSigner(RemoteSigner(signed.signer.url, address_of(key)), chain_id=DEV_CHAIN_ID)
    try:
        fees = Fees(3 * 10**9, 10**9)
        for nonce in range(3):
            to = None if nonce == 0 else address_of(new_private_key())
            theirs = await remote.sign(nonce, to, b"\x01" * nonce, gas=60_000, value=nonce, fees=fees)
            assert theirs == local.sign_now(nonce, to, b"\x01" * nonce, gas=60_000, value=nonce, fees=fees)
        assert "is up and holds" in await remote.signer.check()
    finally:
        await remote.signer.aclose()
    stranger = RemoteSigner(signed.signer.url, address_of(new_private_key()))
    down = RemoteSigner(f"http://127.0.0.1:{free_port()}", address_of(key))
    try:
        with pytest.raises(SignerUnavailable, match="holds no key of"):
            await stranger.sign(b"anything")
        with pytest.raises(SignerUnavailable, match="cannot be reached"):
            await down.sign(b"anything")
        with pytest.raises(TypeError):
            remote.sign_now(0, None, b"", gas=1, value=0, fees=fees)
    finally:
        await stranger.aclose()
        await down.aclose()
