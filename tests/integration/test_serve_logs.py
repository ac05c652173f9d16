"""``x402mw platform serve --log-format json``: a real server's lines, each request's with its id."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
from click.testing import CliRunner

from tests.waiting import eventually
from x402mw.cli import main
from x402mw.platform.server import free_port


def test_serve_writes_json_lines_that_name_each_request(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    command = [sys.executable, "-m", "x402mw", "platform", "serve", "--port", str(port), "--log-format", "json"]
    env = dict(os.environ, X402MW_DATA_DIR=str(tmp_path / "data"))
    with log.open("wb") as handle:
        server = subprocess.Popen(command, env=env, stdout=handle, stderr=subprocess.STDOUT)
    try:
        healthz = eventually(
            lambda: server.poll() is not None or httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1),
            what=lambda: f"serve to answer:\n{log.read_text()}",
        )
        assert server.poll() is None, log.read_text()
        ids = [healthz.headers["request-id"]]
        missing = httpx.get(f"http://127.0.0.1:{port}/v1/agent/endpoints/ep_x", timeout=5)
        assert missing.status_code == 401
        ids.append(missing.headers["request-id"])
    finally:
        server.terminate()
        server.wait(timeout=30)
    lines = [json.loads(line) for line in log.read_text().splitlines()]  # every line is JSON
    access = [line for line in lines if line["logger"] == "uvicorn.access"]
    assert [(line["requestId"], line["method"], line["path"], line["status"]) for line in access[-2:]] == [
        (ids[0], "GET", "/healthz", 200),
        (ids[1], "GET", "/v1/agent/endpoints/ep_x", 401),
    ]
    assert any(line["message"].startswith("Uvicorn running on") for line in lines)


def test_an_unknown_log_level_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["platform", "serve", "--data-dir", str(tmp_path), "--log-level", "loud"])
    assert result.exit_code == 2
    assert "log level must be one of" in result.output
