"""The docs check: every fenced shell and Python block of docs/quickstart.md and docs/agents.md runs, in
the page's order, against a fresh platform, so the pages cannot go stale.

How a page is run:

- A ```bash, ```sh or ```shell block runs in ``bash -e`` from the repository root, with the
  variables the earlier blocks set (they run under ``set -a``: every assignment is exported), and
  ``python`` and ``x402mw`` from this interpreter's environment first on ``PATH``.
- A ```python block runs in one Python process per page, all blocks in one namespace, with the
  environment the shell blocks have built so far (so ``os.environ["X402MW_API_KEY"]`` is the key a
  shell block exported).
- The platform is the page's own: ``x402mw platform serve`` as the page says, with
  ``X402MW_DATA_DIR`` a fresh temporary folder. The page's ports are the defaults, 4402 for the
  platform and 8000 for a seller; each is replaced by a free port in the blocks (and ``X402MW_PORT``
  and ``PORT`` say so), so that checks run side by side.

Markers, an HTML comment on the line before a block (invisible on the rendered page):

- ``<!-- docs-check: skip -->``: the block is not run (it shows output, a fragment, or a placeholder
  such as another seller's URL);
- ``<!-- docs-check: background -->``: a shell block that starts a server (``serve``, or a seller put
  in the background with ``&``): it is started in the background, and the next block waits until the
  page's ports answer (the platform's after the first such block, the seller's too after the second),
  failing if the block exits with an error or nothing answers in time. The processes of every
  background block are stopped at the end (their process group).

Every block has a time limit (120 s) and the whole page is bounded by its blocks.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.waiting import eventually
from x402mw.platform.server import free_port

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["quickstart.md", "agents.md"]
SHELLS = {"bash", "sh", "shell"}
BLOCK_SECONDS = 120
_FENCE = re.compile(
    r"^(?P<marker><!-- docs-check: (?P<what>[a-z]+) -->\n)?```(?P<lang>[a-z]*)\n(?P<code>.*?)^```$", re.M | re.S
)


@dataclass(frozen=True)
class Block:
    lang: str
    code: str
    marker: str | None
    line: int


def blocks(page: str) -> list[Block]:
    """The fenced shell and Python blocks of ``page``, in order, with their markers."""
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    found = []
    for match in _FENCE.finditer(text):
        lang = match["lang"]
        if lang in SHELLS or lang == "python":
            marker = match["what"]
            assert marker in (None, "skip", "background"), f"{page}: unknown docs-check marker {marker!r}"
            found.append(Block(lang, match["code"], marker, text.count("\n", 0, match.start()) + 1))
    return found


_DRIVER = """
import json, os, sys, traceback
namespace = {"__name__": "__docs__"}
for line in sys.stdin:
    message = json.loads(line)
    os.environ.clear()
    os.environ.update(message["env"])
    try:
        exec(compile(message["code"], message["name"], "exec"), namespace)
        answer = {"ok": True}
    except BaseException:
        answer = {"ok": False, "error": traceback.format_exc()}
    sys.stdout.flush()
    sys.stderr.flush()
    print("\\n@@docs-check@@" + json.dumps(answer), flush=True)
"""


class Page:
    """One page's run: its shell state, its Python process, its background servers."""

    def __init__(self, page: str, workdir: Path) -> None:
        self.page = page
        self.workdir = workdir
        self.ports = {"4402": str(free_port()), "8000": str(free_port())}
        self.state = workdir / "shell-state"
        bin_dir = str(Path(sys.executable).parent)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("X402MW_") or k == "X402MW_ANVIL"}
        self.env |= {
            "PATH": bin_dir + os.pathsep + self.env.get("PATH", ""),
            "X402MW_DATA_DIR": str(workdir / "data"),
            "X402MW_PORT": self.ports["4402"],
            "PORT": self.ports["8000"],
        }
        self.background: list[tuple[subprocess.Popen[bytes], Path]] = []
        self.python: subprocess.Popen[str] | None = None

    def code(self, block: Block) -> str:
        code = block.code
        for port, free in self.ports.items():
            code = code.replace(f"127.0.0.1:{port}", f"127.0.0.1:{free}").replace(
                f"localhost:{port}", f"localhost:{free}"
            )
        return code

    def where(self, block: Block) -> str:
        return f"docs/{self.page}:{block.line}"

    def shell(self, block: Block) -> None:
        self._wait_for_background()
        script = f"set -a\n[ -f {self.state} ] && . {self.state}\n{self.code(block)}\nexport -p > {self.state}\n"
        if block.marker == "background":
            log = self.workdir / f"background-{len(self.background)}.log"
            with log.open("wb") as handle:
                process = subprocess.Popen(
                    ["bash", "-ec", self.code(block)],
                    cwd=ROOT,
                    env=self._shell_env(),
                    stdout=handle,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            self.background.append((process, log))
            return
        log = self.workdir / "shell.log"
        with log.open("wb") as handle:
            done = subprocess.run(
                ["bash", "-ec", script],
                cwd=ROOT,
                env=self.env,
                stdout=handle,
                stderr=subprocess.STDOUT,
                timeout=BLOCK_SECONDS,
            )
        assert done.returncode == 0, f"{self.where(block)} failed ({done.returncode}):\n{log.read_text()[-4000:]}"

    def run_python(self, block: Block) -> None:
        self._wait_for_background()
        if self.python is None:
            self.python = subprocess.Popen(
                [sys.executable, "-c", _DRIVER],
                cwd=ROOT,
                env=self.env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        assert self.python.stdin is not None and self.python.stdout is not None
        message = {"code": self.code(block), "name": self.where(block), "env": self._shell_env()}
        self.python.stdin.write(json.dumps(message) + "\n")
        self.python.stdin.flush()
        said: list[str] = []
        deadline = time.monotonic() + BLOCK_SECONDS
        for line in self.python.stdout:  # bounded: every block ends with the driver's answer
            if line.startswith("@@docs-check@@"):
                answer = json.loads(line.removeprefix("@@docs-check@@"))
                assert answer["ok"], f"{self.where(block)} raised:\n{''.join(said)[-2000:]}\n{answer['error']}"
                return
            said.append(line)
            assert time.monotonic() < deadline, f"{self.where(block)} ran over {BLOCK_SECONDS} s"
        raise AssertionError(f"{self.where(block)}: the Python process ended:\n{''.join(said)[-4000:]}")

    def _shell_env(self) -> dict[str, str]:
        """The environment as the shell blocks have left it."""
        if not self.state.exists():
            return dict(self.env)
        done = subprocess.run(
            ["bash", "-c", f"set -a; . {self.state}; env -0"], env=self.env, capture_output=True, timeout=30, check=True
        )
        pairs = [item.split(b"=", 1) for item in done.stdout.split(b"\0") if b"=" in item]
        return {k.decode(): v.decode() for k, v in pairs}

    def _wait_for_background(self) -> None:
        if not self.background:
            return
        urls = [f"http://127.0.0.1:{self.ports['4402']}/healthz"]
        if len(self.background) > 1:
            urls.append(f"http://127.0.0.1:{self.ports['8000']}/")

        def failed() -> list[str]:  # a block may end once it has put its server in the background
            return [log.read_text() for process, log in self.background if process.poll() not in (None, 0)]

        def up_or_failed() -> bool:
            return bool(failed()) or all(httpx.get(url, timeout=2) for url in urls)

        eventually(up_or_failed, what=f"{' and '.join(urls)} to answer", timeout=BLOCK_SECONDS, interval=0.2)
        assert not failed(), f"a background block of docs/{self.page} failed:\n{failed()[0]}"

    def close(self) -> None:
        if self.python is not None:
            assert self.python.stdin is not None and self.python.stdout is not None
            self.python.stdin.close()
            self.python.wait(timeout=30)
            self.python.stdout.close()
        for process, _ in self.background:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)


@contextlib.contextmanager
def running(page: str, workdir: Path) -> Iterator[Page]:
    run = Page(page, workdir)
    try:
        yield run
    finally:
        run.close()


@pytest.mark.parametrize("page", PAGES)
def test_every_block_of_the_page_runs(page: str, tmp_path: Path) -> None:
    found = blocks(page)
    assert any(b.marker is None for b in found), f"docs/{page} has nothing to run"
    with running(page, tmp_path) as run:
        for block in found:
            if block.marker == "skip":
                continue
            if block.lang == "python":
                run.run_python(block)
            else:
                run.shell(block)


def test_the_markers_are_read() -> None:
    # the convention itself: a marker applies to the block right under it, and only to it
    page = blocks("agents.md")
    assert {b.marker for b in page} >= {None, "skip", "background"}
    assert all(b.lang in SHELLS | {"python"} for b in page)


def test_the_readme_s_five_minutes_are_the_agents_guide_s() -> None:
    # the README's copy is not run: each of its commands must be one the docs check runs in agents.md
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Sell to agents in five minutes", 1)[1].split("\n## ", 1)[0]
    checked = "\n".join(b.code for b in blocks("agents.md") if b.marker != "skip")

    def commands(text: str) -> list[str]:
        return [line.split("  #", 1)[0].rstrip() for line in text.splitlines()]

    ran = set(commands(checked))
    readme_commands = [c for block in re.findall(r"```bash\n(.*?)```", section, re.S) for c in commands(block) if c]
    assert readme_commands and [c for c in readme_commands if c not in ran] == []
