"""examples/mcp_seller.py and examples/mcp_agent.py, run as their docstrings say, from another folder:
over streamable HTTP and over stdio, a paid call settles and a failing one is not charged."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.harness import PlatformHarness, sqlite_only
from tests.mcp_processes import EXAMPLES, environment, free_port, run, running, seller_command

pytestmark = sqlite_only


def _agent(server: str, city: str, *, stdio: bool = False) -> list[str]:
    import sys

    return [
        sys.executable,
        str(EXAMPLES / "mcp_agent.py"),
        *(["--stdio"] if stdio else []),
        server,
        "forecast",
        json.dumps({"city": city}),
    ]


def test_the_examples_pay_a_tool_over_http_and_stdio(dev_platform: PlatformHarness, tmp_path: Path) -> None:
    deployment = dev_platform.deploy(resource_url="mcp://tool/forecast")
    env = environment(
        X402MW_PRIVATE_KEY="0x" + deployment.agent_key.hex(),
        X402MW_RECEIPT_SIGNER=dev_platform.platform.receipt_address,
    )
    before = dev_platform.balance(deployment.payout)
    port = free_port()
    with running(seller_command(deployment, "--port", str(port)), port, tmp_path) as url:
        paid = run(_agent(url, "Lisbon"), tmp_path, env)
        assert paid.returncode == 0, paid.stdout + paid.stderr
        assert "Sunny in Lisbon tomorrow (paid by 0x" in paid.stdout
        assert "paid 0.01 " in paid.stdout and "receipt verified: True" in paid.stdout

        failed = run(_agent(url, "nowhere"), tmp_path, env)
        assert failed.returncode == 1, failed.stdout + failed.stderr
        assert "paid " not in failed.stdout
    assert dev_platform.balance(deployment.payout) == before + 10_000

    command = " ".join(seller_command(deployment, "--stdio"))
    over_stdio = run(_agent(command, "Porto", stdio=True), tmp_path, env)
    assert over_stdio.returncode == 0, over_stdio.stdout + over_stdio.stderr
    assert "Sunny in Porto tomorrow" in over_stdio.stdout and "receipt verified: True" in over_stdio.stdout
    assert dev_platform.balance(deployment.payout) == before + 20_000
    with deployment.api() as api:
        statuses = [p["status"] for p in api.get("/agent/payments").json()["data"]]
    assert statuses == ["settled", "settled"]


def test_the_examples_pay_a_metered_tool_for_what_it_used(dev_platform: PlatformHarness, tmp_path: Path) -> None:
    deployment = dev_platform.deploy(resource_url="mcp://tool/forecast")
    body = {key: deployment.endpoint[key] for key in ("chainId", "currency", "payoutAddress")}
    body |= {"name": "summarize", "resourceUrl": "mcp://tool/summarize", "pricingMode": "metered"}
    with deployment.api() as api:
        reply = api.post("/agent/endpoints", json=body | {"maxAmountMinor": "5000"})
        assert reply.status_code == 201, reply.text
        metered = reply.json()["endpoint"]["id"]
    env = environment(
        X402MW_PRIVATE_KEY="0x" + deployment.agent_key.hex(),
        X402MW_RECEIPT_SIGNER=dev_platform.platform.receipt_address,
    )
    port = free_port()
    text = "one two three four five six seven eight nine ten eleven twelve"
    seller = seller_command(deployment, "--port", str(port), "--metered-endpoint", metered)
    with running(seller, port, tmp_path) as url:
        # no Permit2 allowance and no gas: the agent signs an EIP-2612 permit with its payment
        arguments = json.dumps({"text": text, "words": 3})
        paid = run([sys.executable, str(EXAMPLES / "mcp_agent.py"), url, "summarize", arguments], tmp_path, env)
    assert paid.returncode == 0, paid.stdout + paid.stderr
    assert "one two three" in paid.stdout
    assert "paid 0.0003 USDC" in paid.stdout and "(of at most 0.005)" in paid.stdout, paid.stdout
    assert "receipt verified: True" in paid.stdout
    assert dev_platform.balance(deployment.payout) == 300


def test_the_agent_s_stdio_command_as_documented_works_from_any_folder(
    dev_platform: PlatformHarness, tmp_path: Path
) -> None:
    # the docstring's command names the seller as examples/mcp_seller.py, from outside the repository
    deployment = dev_platform.deploy(resource_url="mcp://tool/forecast")
    env = environment(X402MW_PRIVATE_KEY="0x" + deployment.agent_key.hex())
    seller = ["examples/mcp_seller.py", "--stdio", "--platform-url", deployment.harness.url]
    command = " ".join([sys.executable, *seller, "--api-key", deployment.api_key, "--endpoint", deployment.endpoint_id])
    assert not (tmp_path / "examples").exists()
    paid = run(_agent(command, "Faro", stdio=True), tmp_path, env)
    assert paid.returncode == 0, paid.stdout + paid.stderr
    assert "Sunny in Faro tomorrow" in paid.stdout and "paid 0.01 " in paid.stdout
