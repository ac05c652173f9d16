"""The docs check: every fenced shell and Python block of README.md and of every page of docs/ runs,
in the page's order, against a platform of its own or the quickstart's, so the pages cannot go stale.

How a page is run:

- A page starts from what the [quickstart](docs/quickstart.md)'s first step leaves: its platform
  (``x402mw platform serve``) and its merchant's test key (``X402MW_PLATFORM_URL``,
  ``X402MW_API_KEY``): the check runs those two blocks of the quickstart first. The platform block
  runs once per test process, and the pages that start from it share that platform (and its data
  dir); the key block runs for each page, so each has a merchant of its own, as on a fresh platform
  (a page sees other merchants only through the operator's commands). A page that starts its own
  platform (a background block running ``platform serve``: the quickstart, the agents' five
  minutes, the README) starts from nothing.
- A ```bash, ```sh or ```shell block runs in ``bash -e`` from the repository root, with the
  variables the earlier blocks set (they run under ``set -a``: every assignment is exported), and
  ``python`` and ``x402mw`` from this interpreter's environment first on ``PATH``. ``pip`` is
  checked, not run (the suite's environment is not to change): ``pip install -e ".[extra]"``, from
  the checkout, must name extras the project has.
- A ```python block runs in one Python process per page, all blocks in one namespace, with the
  environment the shell blocks have built so far (so ``os.environ["X402MW_API_KEY"]`` is the key a
  shell block exported). A block with a top-level ``await`` runs as ``python -m asyncio`` would.
- Ports: every port a page names (``127.0.0.1:N``, ``localhost:N``, ``--port N``, ``PORT=N``) is
  replaced by a free one in its blocks, 4402 (the platform's) and 8000 (a seller's) included, and
  ``X402MW_PORT`` and ``PORT`` say which those two became, so that pages run side by side.

Markers, an HTML comment on the line before a block (invisible on the rendered page):

- ``<!-- docs-check: skip -->``: the block is not run (it shows output, or needs what a local check
  cannot have: another host, production settings);
- ``<!-- docs-check: fragment -->``: a Python block that is a part of an application, not a
  program (a decorator on a view of yours, a settings file): it is compiled and its imports run,
  so that every name it takes from x402mw exists;
- ``<!-- docs-check: background -->``, or ``background N``: a shell block that starts a server
  (``serve``, or a seller put in the background with ``&``): it is started in the background, and
  the next block waits until it answers: on port N (as replaced), or the platform's port for
  ``platform serve``, or else 8000's. It fails if the block exits with an error or nothing answers
  in time. The processes of every background block are stopped at the end (their process group).

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
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.waiting import eventually
from x402mw.platform.server import free_port

ROOT = Path(__file__).resolve().parents[2]
SHELLS = {"bash", "sh", "shell"}
BLOCK_SECONDS = 120
MARKERS = {None, "skip", "fragment", "background"}
_FENCE = re.compile(
    r"^(?P<marker><!-- docs-check: (?P<what>[a-z]+)(?: (?P<port>\d+))? -->\n)?```(?P<lang>[a-z]*)\n(?P<code>.*?)^```$",
    re.M | re.S,
)
_PORT = re.compile(r"(?P<before>(?:127\.0\.0\.1|localhost):|--port[ =]|--metrics-port[ =]|\bPORT=)(?P<port>\d{2,5})\b")


@dataclass(frozen=True)
class Block:
    lang: str
    code: str
    marker: str | None
    line: int
    page: str = ""
    port: str | None = None

    @property
    def starts_the_platform(self) -> bool:
        return self.marker == "background" and "platform serve" in self.code


def blocks(page: str) -> list[Block]:
    """The fenced shell and Python blocks of ``page`` (a path from the repository's root), in order,
    with their markers."""
    text = (ROOT / page).read_text(encoding="utf-8")
    found = []
    for match in _FENCE.finditer(text):
        lang = match["lang"]
        if lang in SHELLS or lang == "python":
            marker = match["what"]
            assert marker in MARKERS, f"{page}: unknown docs-check marker {marker!r}"
            line = text.count("\n", 0, match.start()) + 1 + (1 if marker else 0)
            found.append(Block(lang, match["code"], marker, line, page, match["port"]))
    return found


CHECKED = [
    "README.md",
    "docs/index.md",
    "docs/quickstart.md",
    "docs/agents.md",
    "docs/mcp.md",
    "docs/refunds.md",
    "docs/metered.md",
    "docs/gateway.md",
    "docs/sellers/starlette.md",
    "docs/sellers/flask.md",
    "docs/sellers/wsgi.md",
    "docs/sellers/django.md",
    "docs/sellers/asgi.md",
    "docs/payment-orders.md",
    "docs/payment-links.md",
    "docs/reports.md",
    "docs/webhooks.md",
    "docs/subscriptions.md",
    "docs/merchant-client.md",
    "docs/agent-api.md",
    "docs/monitoring.md",
    "docs/checkout-js.md",
    "docs/platform.md",
    "docs/sellers/discovery.md",
    "docs/sellers/paywall.md",
    "docs/sellers/sign-in.md",
    "docs/sellers/x402-sdk.md",
    "docs/local-chain.md",
    "docs/production.md",
]
"""The pages run so far; the others of `pages` are still to be made to run as written (issue 36)."""


def pages() -> list[str]:
    """README.md and every page of docs/ that has a shell or Python block."""
    docs = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "docs").rglob("*.md"))
    return [page for page in ["README.md", *docs] if blocks(page)]


def prelude() -> list[Block]:
    """The quickstart's first step: its platform, and its merchant with a test key."""
    serve, key = blocks("docs/quickstart.md")[:2]
    assert serve.starts_the_platform and "X402MW_API_KEY" in key.code, "the quickstart's first step moved"
    return [serve, key]


def plan(page: str) -> list[Block]:
    """The blocks the check runs for ``page``, in order, the prelude first when the page needs it."""
    own = blocks(page)
    return own if any(b.starts_the_platform for b in own) else prelude() + own


_DRIVER = """
import ast, asyncio, inspect, json, os, sys, traceback
namespace = {"__name__": "__docs__"}
for line in sys.stdin:
    message = json.loads(line)
    os.environ.clear()
    os.environ.update(message["env"])
    try:
        tree = ast.parse(message["code"], message["name"])
        if message["fragment"]:  # compiled whole; only its imports run, in a namespace of its own
            compile(tree, message["name"], "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            imports = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
            exec(compile(ast.Module(imports, []), message["name"], "exec"), {"__name__": "__fragment__"})
        else:
            code = compile(tree, message["name"], "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            if code.co_flags & inspect.CO_COROUTINE:
                asyncio.run(eval(code, namespace))
            else:
                exec(code, namespace)
        answer = {"ok": True}
    except BaseException:
        answer = {"ok": False, "error": traceback.format_exc()}
    sys.stdout.flush()
    sys.stderr.flush()
    print("\\n@@docs-check@@" + json.dumps(answer), flush=True)
"""

_PIP = """
import re, sys, tomllib
from pathlib import Path

args = sys.argv[1:]
extras = tomllib.loads(Path("pyproject.toml").read_text())["project"]["optional-dependencies"]
ok = args[:2] == ["install", "-e"] and len(args) == 3
match = re.fullmatch(r"\\.(?:\\[([a-z0-9,-]+)\\])?", args[-1]) if ok else None
if match is None:
    sys.exit(f"docs check: pip {' '.join(args)}: only pip install -e '.[extra]', from the checkout, is checked")
unknown = [e for e in (match[1] or "").split(",") if e and e not in extras]
sys.exit(f"docs check: no extra {unknown} in pyproject.toml" if unknown else 0)
"""


class Page:
    """One page's run: its shell state, its Python process, its background servers."""

    def __init__(self, page: str, workdir: Path, plan: list[Block], platform: Page | None = None) -> None:
        """``platform``: the run of the quickstart's platform block this page starts from (its port
        and data dir are the page's), or None when the page starts its platform itself."""
        self.page = page
        self.workdir = workdir
        named = {m["port"] for b in plan if b.marker != "skip" for m in _PORT.finditer(b.code)}
        named |= {b.port for b in plan if b.port}
        self.ports = {port: str(free_port()) for port in sorted(named | {"4402", "8000"})}
        if platform is not None:
            self.ports["4402"] = platform.ports["4402"]
        self.state = workdir / "shell-state"
        bin_dir = workdir / "bin"
        bin_dir.mkdir()
        (bin_dir / "pip").write_text(f"#!{sys.executable}\n{_PIP}")
        (bin_dir / "pip").chmod(0o755)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("X402MW_") or k == "X402MW_ANVIL"}
        self.env |= {
            "PATH": os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), self.env.get("PATH", "")]),
            "X402MW_DATA_DIR": str((platform.workdir if platform is not None else workdir) / "data"),
            "X402MW_PORT": self.ports["4402"],
            "PORT": self.ports["8000"],
        }
        self.background: list[tuple[subprocess.Popen[bytes], Path]] = []
        self.waiting: list[str] = []  # the URLs of background blocks not yet seen answering
        self.python: subprocess.Popen[str] | None = None

    def code(self, block: Block) -> str:
        return _PORT.sub(lambda m: m["before"] + self.ports[m["port"]], block.code)

    def where(self, block: Block) -> str:
        return f"{block.page}:{block.line}"

    def run(self, block: Block) -> None:
        if block.lang == "python":
            self.run_python(block)
        else:
            self.shell(block)

    def shell(self, block: Block) -> None:
        self._wait_for_background()
        script = f"set -a\n[ -f {self.state} ] && . {self.state}\n{self.code(block)}\nexport -p > {self.state}\n"
        if block.marker == "background":
            log = self.workdir / f"background-{len(self.background)}.log"
            with log.open("wb") as handle:
                process = subprocess.Popen(
                    ["bash", "-ec", f"set -a\n[ -f {self.state} ] && . {self.state}\n{self.code(block)}"],
                    cwd=ROOT,
                    env=self.env,
                    stdout=handle,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            self.background.append((process, log))
            if block.port:
                self.waiting.append(f"http://127.0.0.1:{self.ports[block.port]}/")
            elif block.starts_the_platform:
                self.waiting.append(f"http://127.0.0.1:{self.ports['4402']}/healthz")
            else:
                self.waiting.append(f"http://127.0.0.1:{self.ports['8000']}/")
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
        message = {
            "code": self.code(block),
            "name": self.where(block),
            "env": self._shell_env(),
            "fragment": block.marker == "fragment",
        }
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
        if not self.waiting:
            return
        urls = self.waiting

        def failed() -> list[str]:  # a block may end once it has put its server in the background
            return [log.read_text() for process, log in self.background if process.poll() not in (None, 0)]

        def up_or_failed() -> bool:
            return bool(failed()) or all(httpx.get(url, timeout=2) for url in urls)

        eventually(up_or_failed, what=f"{' and '.join(urls)} to answer", timeout=BLOCK_SECONDS, interval=0.1)
        assert not failed(), f"a background block of {self.page} failed:\n{failed()[0][-4000:]}"
        self.waiting = []

    def still_serving(self) -> None:
        """The background blocks answered and none has ended since (a page is about to start on them)."""
        self._wait_for_background()
        ended = [log.read_text() for process, log in self.background if process.poll() is not None]
        assert not ended, f"a background block of {self.page} ended:\n{ended[0][-4000:]}"

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
def running(page: str, workdir: Path, steps: list[Block], platform: Page | None = None) -> Iterator[Page]:
    run = Page(page, workdir, steps, platform)
    try:
        yield run
    finally:
        run.close()


class QuickstartPlatform:
    """The quickstart's platform block, run on first use and kept until the session ends: the pages
    that start from the prelude share it (each with its own merchant, from the key block)."""

    def __init__(self, stack: contextlib.ExitStack, workdir: Path) -> None:
        self._stack = stack
        self._workdir = workdir
        self._run: Page | None = None

    def get(self) -> Page:
        serve = prelude()[0]
        if self._run is None:
            self._run = self._stack.enter_context(running(serve.page, self._workdir, [serve]))
            self._run.run(serve)
        self._run.still_serving()
        return self._run


@pytest.fixture(scope="session")
def quickstart_platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuickstartPlatform]:
    with contextlib.ExitStack() as stack:
        yield QuickstartPlatform(stack, tmp_path_factory.mktemp("quickstart-platform"))


@pytest.mark.parametrize("page", CHECKED)
def test_every_block_of_the_page_runs(page: str, tmp_path: Path, quickstart_platform: QuickstartPlatform) -> None:
    steps = plan(page)
    assert any(b.marker is None for b in blocks(page)), f"{page} has nothing to run"
    platform = None
    if steps[: len(prelude())] == prelude():
        platform = quickstart_platform.get()
        steps = steps[1:]  # the platform block: run, by the shared platform
    with running(page, tmp_path, steps, platform) as run:
        for block in steps:
            if block.marker != "skip":
                run.run(block)


def test_the_markers_are_read() -> None:
    # the convention itself: a marker applies to the block right under it, and only to it
    page = blocks("docs/agents.md")
    assert {b.marker for b in page} >= {None, "skip", "background"}
    assert all(b.lang in SHELLS | {"python"} for b in page)
    assert prelude()[0].page == "docs/quickstart.md" and plan("docs/mcp.md")[:2] == prelude()
    assert plan("docs/agents.md") == blocks("docs/agents.md")  # a page with its own platform has no prelude


def test_the_checked_pages_are_pages_and_skips_are_few() -> None:
    # a skip is the exception, counted here
    assert set(CHECKED) <= set(pages())
    every = [b for page in CHECKED for b in blocks(page)]
    skipped = [f"{b.page}:{b.line}" for b in every if b.marker == "skip"]
    assert len(skipped) <= len(every) // 5, skipped


def test_pip_installs_from_the_checkout() -> None:
    # no package index serves x402mw: the pages install it from the checkout, with extras it has
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for page in pages():
        for block in blocks(page):
            for line in block.code.splitlines():
                if re.match(r"\s*pip install", line):
                    assert re.fullmatch(r'\s*pip install -e "\.(\[[a-z,]+\])?"\s*', line), f"{page}: {line}"
                    assert set(re.findall(r"[a-z]+", line.partition("[")[2])) <= set(extras), f"{page}: {line}"


def test_the_readme_s_five_minutes_are_the_agents_guide_s() -> None:
    # the README's copy is not run: each of its commands must be one the docs check runs in agents.md
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Sell to agents in five minutes", 1)[1].split("\n## ", 1)[0]
    checked = "\n".join(b.code for b in blocks("docs/agents.md") if b.marker != "skip")

    def commands(text: str) -> list[str]:
        return [line.split("  #", 1)[0].rstrip() for line in text.splitlines()]

    ran = set(commands(checked))
    readme_commands = [c for block in re.findall(r"```bash\n(.*?)```", section, re.S) for c in commands(block) if c]
    assert readme_commands and [c for c in readme_commands if c not in ran] == []
