"""``x402mw ...`` run in this process with click's `CliRunner`, answered as `subprocess.run` would:
for the tests of what a command says and does, where the process itself is not what is tested (a
``python -m x402mw`` costs a second or two of imports; the command in-process costs milliseconds).
A test about the process (its signals, its exit on a kill, what another interpreter sees) starts
it for real."""

from __future__ import annotations

import os
import subprocess
import traceback

from click.testing import CliRunner

from x402mw.cli import main


def run_cli(args: list[str], env: dict[str, str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``x402mw *args`` with exactly ``env`` for its environment (what is in this process's and not
    in ``env`` is unset for the run); its exit status, standard output and standard error. An error
    that escapes the command is a traceback on standard error and status 1, as in a process."""
    changes: dict[str, str | None] = {k: v for k, v in env.items() if os.environ.get(k) != v}
    changes |= {k: None for k in os.environ if k not in env}
    result = CliRunner().invoke(main, args, input=stdin, env=changes, prog_name="x402mw")
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        assert result.exc_info is not None
        stderr += "".join(traceback.format_exception(*result.exc_info))
    return subprocess.CompletedProcess(["x402mw", *args], result.exit_code, result.stdout, stderr)
