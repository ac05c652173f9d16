"""The container recipe (issue 38), run on this machine: no image registry is reachable here, so the
test reads what the image and compose would run (the Dockerfile's ENV and CMD, compose's commands and
environment) and runs exactly those commands, in that environment, against PostgreSQL, Redis and a
chain: the migrate step, the API as two processes, the worker; then readiness, one paid request and
a drain. What only a container runtime gives (the image's file system, the service names resolving
to the containers) is mapped to this machine: the data dir, the database's and Redis's addresses."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.harness import postgres_database
from tests.redis_process import RedisProcess
from tests.sellers import asgi_transport, starlette_app
from tests.waiting import eventually
from x402mw.client import Wallet, X402Auth
from x402mw.evm.keys import address_of, new_private_key
from x402mw.platform.chain.anvil import ANVIL_DEV_KEYS, AnvilProcess, deploy_test_tokens
from x402mw.platform.chain.rpc import HttpJsonRpc
from x402mw.platform.server import free_port
from x402mw.protocol import decode_settlement_response

ROOT = Path(__file__).resolve().parents[2]


def dockerfile() -> tuple[list[str], dict[str, str], str, str, list[str]]:
    """The final stage's CMD, ENV, USER, HEALTHCHECK command and every FROM."""
    text = re.sub(r"\\\n\s*", " ", (ROOT / "Dockerfile").read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    froms = [line.split()[1] for line in lines if line.startswith("FROM ")]
    final = max(i for i, line in enumerate(lines) if line.startswith("FROM "))
    env: dict[str, str] = {}
    cmd: list[str] = []
    user = health = ""
    for line in lines[final:]:
        instruction, _, rest = line.partition(" ")
        if instruction == "ENV":
            env |= dict(item.split("=", 1) for item in shlex.split(rest))
        elif instruction == "CMD":
            cmd = json.loads(rest)
        elif instruction == "USER":
            user = rest
        elif instruction == "HEALTHCHECK":
            health = rest
    return cmd, env, user, health, froms


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text())
    return loaded


def interpolated(value: str, variables: dict[str, str]) -> str:
    """Compose's ``${NAME}``, ``${NAME:-default}`` and ``${NAME:?error}`` with ``variables``."""

    def one(match: re.Match[str]) -> str:
        name, operator, word = match.group(1), match.group(2), match.group(3)
        if variables.get(name):
            return variables[name]
        assert operator != ":?", f"compose would refuse: {word}"
        return word or ""

    return re.sub(r"\$\{(\w+)(?:(:-|:\?)([^}]*))?\}", one, value)


def test_the_recipe_is_what_production_asks_for() -> None:
    cmd, env, user, health, froms = dockerfile()
    assert cmd == ["x402mw", "platform", "serve"]
    assert all(re.fullmatch(r"python:3\.11\.\d+-slim-\w+(@sha256:[0-9a-f]{64})?", image) for image in froms), froms
    assert len(froms) == 2, "multi-stage: a build stage and the runtime"
    assert user.split(":")[0] not in ("", "0", "root")
    assert "/healthz" in health and "X402MW_PORT" in health
    assert env["X402MW_HOST"] == "0.0.0.0" and env["X402MW_PORT"] == "4402"
    services = compose()["services"]
    assert set(services) == {"postgres", "redis", "migrate", "api", "worker"}
    assert (
        services["api"]["command"][:3] == ["x402mw", "platform", "serve"] and "--workers" in services["api"]["command"]
    )
    assert services["worker"]["command"] == ["x402mw", "platform", "worker"]
    assert services["api"]["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
    for service in ("api", "worker", "migrate"):
        assert all(name.startswith("X402MW_") for name in services[service]["environment"]), service
    for path in sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document["kind"] != "Deployment":
                continue
            (container,) = document["spec"]["template"]["spec"]["containers"]
            assert container["command"][:2] == ["x402mw", "platform"], path
            assert document["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
            assert "livenessProbe" in container, path
            if container["command"][2] == "serve":
                assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
                assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    help_of = subprocess.run(
        [sys.executable, "-m", "x402mw", *services["api"]["command"][1:], "--help"], capture_output=True, text=True
    )
    assert help_of.returncode == 0, help_of.stderr


class Deployment:
    """The compose services' commands run as processes here."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def env(self, service: str, variables: dict[str, str], overrides: dict[str, str]) -> dict[str, str]:
        spec = compose()["services"][service]
        _, image_env, _, _, _ = dockerfile()
        env = {k: v for k, v in os.environ.items() if not k.startswith("X402MW_")}
        env |= {k: v for k, v in image_env.items() if k != "PATH"}
        env |= {name: interpolated(str(value), variables) for name, value in spec["environment"].items()}
        return env | overrides

    def run(
        self, service: str, variables: dict[str, str], overrides: dict[str, str]
    ) -> subprocess.CompletedProcess[str]:
        command = compose()["services"][service]["command"]
        return subprocess.run(
            [sys.executable, "-m", *command],
            env=self.env(service, variables, overrides),
            capture_output=True,
            text=True,
        )

    def start(self, service: str, variables: dict[str, str], overrides: dict[str, str]) -> Path:
        command = compose()["services"][service].get("command") or dockerfile()[0]
        log = self.workdir / f"{service}.log"
        with log.open("wb") as handle:
            self.processes[service] = subprocess.Popen(
                [sys.executable, "-m", *command],
                env=self.env(service, variables, overrides),
                stdout=handle,
                stderr=subprocess.STDOUT,
            )
        return log

    def stop_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()


@pytest.fixture
def chain() -> Iterator[tuple[str, dict[str, str]]]:
    with AnvilProcess() as anvil:

        async def deploy() -> dict[str, str]:
            rpc = HttpJsonRpc(anvil.url)
            try:
                return await deploy_test_tokens(rpc, ANVIL_DEV_KEYS[0])
            finally:
                await rpc.aclose()

        yield anvil.url, asyncio.run(deploy())


@contextlib.contextmanager
def _redis_url() -> Iterator[str]:
    """Redis at 127.0.0.1:6379 when it answers, else one of the test's own."""
    import redis

    try:
        redis.Redis(port=6379, socket_connect_timeout=2).ping()
    except redis.ConnectionError:
        with RedisProcess() as own:
            yield own.url
        return
    yield "redis://127.0.0.1:6379/15"


def test_the_compose_commands_serve_take_a_payment_and_drain(chain: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    rpc_url, tokens = chain
    variables = {  # what an operator sets in the shell or an .env file
        "POSTGRES_PASSWORD": "unused-here",
        "X402MW_RPC_URL": rpc_url,
        "X402MW_TOKENS": " ".join(f"{symbol}={address}" for symbol, address in tokens.items()),
        "X402MW_RELAYER_KEY": ANVIL_DEV_KEYS[1].hex(),
        **{name: new_private_key().hex() for name in ("X402MW_RECEIPT_KEY", "X402MW_TREASURY_KEY")},
        **{name: new_private_key().hex() for name in ("X402MW_DEPOSIT_SEED", "X402MW_SEALING_KEY")},
    }
    port = free_port()
    deployment = Deployment(tmp_path)
    with postgres_database() as database_url, _redis_url() as redis_url:
        here = {  # the containers' names and file system, on this machine
            "X402MW_DATABASE_URL": database_url,
            "X402MW_REDIS_URL": redis_url,
            "X402MW_DATA_DIR": str(tmp_path / "data"),
            "X402MW_HOST": "127.0.0.1",
            "X402MW_PORT": str(port),
            "X402MW_BASE_URL": f"http://127.0.0.1:{port}/v1",
            "X402MW_MINTER_KEY": ANVIL_DEV_KEYS[0].hex(),  # a test chain's faucet, not part of the recipe
            "X402MW_DATABASE_POOL_SIZE": "6",
        }
        try:
            refused = deployment.start("api", variables, here)
            process = deployment.processes.pop("api")
            assert process.wait(timeout=120) == 1, "serve refuses the schema before the migrate step"
            assert "run `x402mw platform migrate` first" in refused.read_text()

            storage = {name: here[name] for name in ("X402MW_DATABASE_URL", "X402MW_DATA_DIR")}
            migrated = deployment.run("migrate", variables, storage)
            assert migrated.returncode == 0 and "migrated to revision" in migrated.stdout, migrated.stderr

            api_log = deployment.start("api", variables, here)
            worker_log = deployment.start("worker", variables, here)
            root = f"http://127.0.0.1:{port}"
            eventually(
                lambda: httpx.get(root + "/healthz", timeout=10),
                until=lambda r: r.status_code == 200,
                what=lambda: f"the API to answer /healthz:\n{api_log.read_text()}",
                timeout=120,
            )
            ready = eventually(
                lambda: httpx.get(root + "/readyz", timeout=30),
                until=lambda r: r.status_code == 200,
                what=lambda: f"the API to be ready:\n{api_log.read_text()}",
                timeout=120,
            ).json()
            assert set(ready["checks"]) >= {"database", "redis"} and all(c["ok"] for c in ready["checks"].values())
            eventually(lambda: "worker running on" in worker_log.read_text(), what=worker_log.read_text, timeout=120)

            admin = {"X402MW_DATABASE_URL": database_url, "X402MW_DATA_DIR": str(tmp_path / "data")}
            merchant = _cli(admin, "merchants", "create", "--name", "Compose Co")
            key = _cli(admin, "keys", "create", "--merchant", merchant["id"])["key"]
            _paid_request(root + "/v1", key, f"eip155:{_chain_id(rpc_url)}", tokens)

            for service in ("api", "worker"):
                deployment.processes[service].send_signal(signal.SIGTERM)
            for service in ("api", "worker"):
                assert deployment.processes[service].wait(timeout=60) == 0, service
            assert "draining" in worker_log.read_text()
        finally:
            deployment.stop_all()


def _cli(env: dict[str, str], *args: str) -> dict[str, Any]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("X402MW_")}
    done = subprocess.run(
        [sys.executable, "-m", "x402mw", "platform", *args, "--json"],
        env=base | env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _chain_id(rpc_url: str) -> int:
    answer = httpx.post(rpc_url, json={"jsonrpc": "2.0", "id": 1, "method": "eth_chainId", "params": []})
    return int(answer.json()["result"], 16)


def _paid_request(api_url: str, key: str, network: str, tokens: dict[str, str]) -> None:
    agent = Wallet(new_private_key())
    payout = address_of(new_private_key())
    with httpx.Client(base_url=api_url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as api:
        funded = api.post(
            "/sandbox/faucet", json={"network": network, "currency": "USDC", "address": agent.address, "amount": "1"}
        )
        assert funded.status_code == 200, funded.text
        created = api.post(
            "/agent/endpoints",
            json={
                "name": "Weather",
                "resourceUrl": "http://testserver/weather",
                "chainId": int(network.split(":")[1]),
                "currency": "USDC",
                "payoutAddress": payout,
                "pricingMode": "fixed",
                "amountMinor": "10000",
            },
        )
        assert created.status_code == 201, created.text
        endpoint = created.json()["endpoint"]["id"]

    async def pay() -> httpx.Response:
        app = starlette_app(key, api_url, endpoint)
        async with httpx.AsyncClient(
            transport=asgi_transport(app),
            base_url="http://testserver",
            auth=X402Auth(agent, max_amount="0.05"),
            timeout=60,
        ) as client:
            return await client.get("/weather")

    response = asyncio.run(pay())
    assert response.status_code == 200, response.text
    assert decode_settlement_response(response.headers["PAYMENT-RESPONSE"]).success
