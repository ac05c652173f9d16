"""The gateway's test setup: the upstream (`tests.gateway_upstream`) in its own process, and a
gateway in front of it selling its routes through the real platform."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from tests.harness import Deployment, PlatformHarness
from tests.waiting import eventually
from x402mw.gateway.app import GatewayApp
from x402mw.gateway.config import GatewayConfig, parse_config
from x402mw.gateway.endpoints import provision
from x402mw.platform.server import free_port

ROOT = Path(__file__).resolve().parents[1]

ROUTES = """
timeout = 2
max_request_body = 1000

[[routes]]
method = "GET"
path = "/weather/{city}"
price = "0.01"
description = "Today's weather"

[[routes]]
method = "GET"
path = "/stream"
price = "0.01"

[[routes]]
method = "GET"
path = "/events"
price = "0.01"

[[routes]]
method = "GET"
path = "/fail"
price = "0.01"

[[routes]]
method = "GET"
path = "/slow"
price = "0.01"

[[routes]]
method = "GET"
path = "/gone"
price = "0.01"

[[routes]]
method = "POST"
path = "/usage"
scheme = "upto"
price = "0.05"
usage_header = "X-Usage"
unit_price = "0.001"

[[routes]]
method = "GET"
path = "/private"
price = "0.02"
unauthorized_to_402 = true
upstream_authorization = "Bearer upstream-secret"

[[routes]]
method = "POST"
path = "/upload"
price = "0.01"
"""


@contextlib.contextmanager
def upstream_process(port: int | None = None) -> Iterator[str]:
    """`tests.gateway_upstream` served by uvicorn in a process of its own; yields its URL."""
    port = port or free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.gateway_upstream", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        eventually(
            lambda: process.poll() is not None or httpx.get(url + "/calls", timeout=2).status_code == 200,
            what="the upstream to answer",
        )
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stderr is not None:
            process.stderr.close()


def gateway_config(harness: PlatformHarness, payout: str, text: str = ROUTES, **extra: Any) -> GatewayConfig:
    data = tomllib.loads(text)
    data.update({"coin": "USDC", "network": harness.network, "payout_address": payout, **extra})
    return parse_config(data)


@dataclass
class Gateway:
    url: str
    upstream: str
    deployment: Deployment
    app: GatewayApp
    endpoints: dict[str, str]

    def calls(self) -> dict[str, int]:
        answer: dict[str, int] = httpx.get(self.upstream + "/calls", timeout=10).json()
        return answer


@contextlib.contextmanager
def running_gateway(
    harness: PlatformHarness, upstream: str, deployment: Deployment, text: str = ROUTES, **extra: Any
) -> Iterator[Gateway]:
    port = free_port()
    if extra.get("origin") == "self":  # the gateway's own URL, known once its port is
        extra["origin"] = f"http://127.0.0.1:{port}"
    config = gateway_config(harness, deployment.payout, text, **extra)
    endpoints = provision(
        config, api_key=deployment.api_key, platform_url=harness.url, public_base=f"http://127.0.0.1:{port}"
    )
    app = GatewayApp(
        config, upstream_url=upstream, api_key=deployment.api_key, platform_url=harness.url, endpoints=endpoints
    )
    with serve_gateway(app, port) as url:
        yield Gateway(url, upstream, deployment, app, endpoints)


@contextlib.contextmanager
def serve_gateway(app: Any, port: int) -> Iterator[str]:
    """``app`` served as `x402mw gateway` serves it: uvicorn without its proxy headers (a client's
    ``X-Forwarded-For`` is not believed)."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", proxy_headers=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        eventually(lambda: server.started, what=f"the gateway to serve on port {port}", interval=0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
