"""``serve`` and ``worker`` as processes, on settings the platform refuses: the message, no traceback,
no secret."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from x402mw.platform.chain.anvil import AnvilProcess
from x402mw.platform.server import free_port
from x402mw.platform.settings import PlatformSettings, env_variable


def _environment() -> dict[str, str]:
    names = {env_variable(name) for name in PlatformSettings.model_fields}
    return {name: value for name, value in os.environ.items() if name.upper() not in names}


def _run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "x402mw", "platform", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)


def test_a_chain_the_platform_refuses_ends_serve_and_worker_with_its_message(tmp_path: Path) -> None:
    with AnvilProcess() as anvil:  # chain 31337, not in the built-in table: its tokens must be named
        with_credentials = anvil.url.replace("http://", "http://operator:hunter2@")
        for command in (["serve", "--port", str(free_port())], ["worker"]):
            data_dir = str(tmp_path / command[0])
            done = _run(*command, "--data-dir", data_dir, "--rpc-url", with_credentials, env=_environment())
            said = done.stdout + done.stderr
            assert done.returncode == 1, said
            expected = f"Error: chain 31337 at {anvil.url} is not in the built-in table; name its token addresses"
            assert expected in said
            assert "Traceback" not in said and "hunter2" not in said


def test_problems_from_the_environment_and_the_options_end_the_process_listed(tmp_path: Path) -> None:
    env = _environment() | {"X402MW_DATA_DIR": str(tmp_path), "X402MW_RELAYER_KEY": "hunter2", "X402MW_SIMULATE": "2"}
    done = _run("serve", "--port", "http", "--workers", "2", env=env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.endswith(
        "Error: 4 problems with the settings:\n"
        "  - X402MW_RELAYER_KEY must be 32 bytes of hex (64 hex digits, 0x optional)\n"
        "  - --port must be a whole number, not 'http'\n"
        "  - --workers above 1 needs --rpc-url: the in-process dev chain lives in one process\n"
        "  - X402MW_SIMULATE must be true or false, not '2'\n"
    )
    assert not (tmp_path / "relayer.key").exists()  # nothing started


def test_serve_warns_of_a_data_dir_inside_a_git_work_tree(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    data_dir = tmp_path / ".x402mw"
    command = [sys.executable, "-m", "x402mw", "platform", "serve", "--port", str(free_port())]
    env = _environment() | {"X402MW_DATA_DIR": str(data_dir)}
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as served:
        try:
            assert served.stdout is not None and served.stderr is not None
            started = served.stdout.readline()  # where the platform is: printed once it started
            warning = served.stderr.readline()
        finally:
            served.terminate()
            served.wait(timeout=60)
    assert started.strip(), started
    assert warning.startswith("warning: the data dir ") and f"git work tree {tmp_path.resolve()}" in warning, warning
    assert (data_dir / ".gitignore").read_text().splitlines()[-1] == "*"
    assert {p.name for p in data_dir.glob("*.key")} >= {"relayer.key", "receipt.key"}
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in [*data_dir.glob("*.key"), data_dir / "deposit.seed"])
