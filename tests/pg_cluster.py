"""Run a command with a PostgreSQL server at ``X402MW_TEST_POSTGRES_URL``, starting a throwaway one if needed.

::

    python -m tests.pg_cluster -- python -m pytest -q

When the URL (default ``postgresql://postgres@127.0.0.1:5432/postgres``) answers, the command runs as
it is. When nothing listens there, a throwaway cluster is made with the local PostgreSQL binaries
(``initdb``/``pg_ctl`` on ``PATH`` or under ``/usr/lib/postgresql/*/bin``) in a temporary directory,
on a free loopback port with its unix socket in that directory too; the command runs with
``X402MW_TEST_POSTGRES_URL`` pointing at it, and the cluster is stopped and removed afterwards, also
when the command fails or is interrupted. Without binaries, or when a server listens but refuses the
URL's credentials, it exits 2 saying how to provide one: the suite never skips PostgreSQL silently.

``initdb`` refuses to run as root; as root the cluster runs as the ``postgres`` user when it exists.
"""

from __future__ import annotations

import enum
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import FrameType

__all__ = ["BINARY_ROOTS", "DEFAULT_URL", "Probe", "find_binaries", "probe", "run"]

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
BINARY_ROOTS = ("/usr/lib/postgresql/*/bin",)
SERVICE_USER = "postgres"
# A throwaway cluster holds nothing worth keeping: skip the disk flushes that make tests wait.
SERVER_OPTIONS = (
    "-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={socket_dir} "
    "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
)
HOW_TO = f"""\
PostgreSQL is needed by the test suite (every database test runs on SQLite and on PostgreSQL).
Provide one of:
  - a running server: set X402MW_TEST_POSTGRES_URL=postgresql://USER[:PASSWORD]@HOST:PORT/DB
    (default {DEFAULT_URL}); USER must be allowed to CREATE DATABASE;
  - the PostgreSQL server binaries (e.g. `apt-get install postgresql`, or initdb and pg_ctl on PATH),
    from which `make test` starts a throwaway cluster by itself."""


class Probe(enum.Enum):
    """What is found at a URL: a server that lets us in, nothing at all, or a server that refuses us."""

    ANSWERS = "answers"
    ABSENT = "absent"
    REFUSES = "refuses"


def probe(url: str, timeout: float = 5.0) -> tuple[Probe, str]:
    """Whether a PostgreSQL server at ``url`` answers ``SELECT 1``; with the driver's error when not."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        with psycopg.connect(url, connect_timeout=max(1, round(timeout))) as conn:
            conn.execute("SELECT 1")
        return Probe.ANSWERS, ""
    except psycopg.Error as exc:
        error = str(exc).strip()
    params = conninfo_to_dict(url)
    host = str(params.get("host") or "/var/run/postgresql").split(",")[0]
    port = int(str(params.get("port") or 5432).split(",")[0])
    return (Probe.REFUSES if _listening(host, port, timeout) else Probe.ABSENT), error


def _listening(host: str, port: int, timeout: float) -> bool:
    if host.startswith("/"):
        return Path(host, f".s.PGSQL.{port}").exists()
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def find_binaries(path: str | None = None, roots: Iterable[str] = BINARY_ROOTS) -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``: from ``path`` (default ``$PATH``) first, then
    the newest version under ``roots``."""
    found = shutil.which("initdb", path=path)
    if found is not None:
        directory = Path(os.path.realpath(found)).parent
        if (directory / "pg_ctl").exists():
            return directory
    candidates = [Path(match) for root in roots for match in glob.glob(root)]
    candidates = [c for c in candidates if (c / "initdb").exists() and (c / "pg_ctl").exists()]
    return max(candidates, key=_version_key, default=None)


def _version_key(directory: Path) -> tuple[int, ...]:
    digits = "".join(char if char.isdigit() else " " for char in str(directory))
    return tuple(int(part) for part in digits.split())


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Cluster:
    """``initdb`` + ``pg_ctl start`` in a fresh temporary directory; `stop` stops and removes it."""

    def __init__(self, binaries: Path, user: pwd.struct_passwd | None) -> None:
        self.binaries = binaries
        self.user = user
        self.root = Path(tempfile.mkdtemp(prefix="x402mw-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.started = False

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        user = self.user
        done = subprocess.run(
            [str(self.binaries / args[0]), *args[1:]],
            cwd=self.root,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
            user=None if user is None else user.pw_uid,
            group=None if user is None else user.pw_gid,
            extra_groups=None if user is None else [],
        )
        if done.returncode != 0:
            log = self.root / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{args[0]} {args[1]} failed ({done.returncode}):\n{done.stdout}{tail}")

    def start(self) -> None:
        if self.user is not None:
            os.chown(self.root, self.user.pw_uid, self.user.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-locale", "-N")
        options = SERVER_OPTIONS.format(port=self.port, socket_dir=self.root)
        self.started = True  # from here on a half-started server must be stopped too
        log = str(self.root / "server.log")
        self._run("pg_ctl", "start", "-D", str(self.data), "-l", log, "-w", "-t", "60", "-o", options)

    def stop(self) -> None:
        try:
            if self.started:
                try:
                    self._run("pg_ctl", "stop", "-D", str(self.data), "-m", "fast", "-w", "-t", "30")
                except RuntimeError:
                    self._run("pg_ctl", "stop", "-D", str(self.data), "-m", "immediate", "-w", "-t", "30")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def _service_user() -> tuple[pwd.struct_passwd | None, str]:
    if os.geteuid() != 0:
        return None, ""
    try:
        return pwd.getpwnam(SERVICE_USER), ""
    except KeyError:
        return None, (
            f"initdb refuses to run as root and there is no '{SERVICE_USER}' user to run it as: "
            f"create one (useradd --system {SERVICE_USER}) or run the suite as an ordinary user."
        )


def _run_command(command: Sequence[str], env: dict[str, str]) -> int:
    """Run ``command`` to its end. Ctrl-C reaches it from the terminal (same process group), so it is
    not forwarded; SIGTERM and SIGHUP are passed on. Either way the caller's cleanup runs after it."""
    child = subprocess.Popen(command, env=env)

    def forward(signum: int, _frame: FrameType | None) -> None:
        child.send_signal(signum)

    previous = {
        signum: signal.signal(signum, handler)
        for signum, handler in (
            (signal.SIGINT, signal.SIG_IGN),
            (signal.SIGTERM, forward),
            (signal.SIGHUP, forward),
        )
    }
    try:
        code = child.wait()
        return 128 - code if code < 0 else code  # killed by a signal: the shell's convention
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def run(
    command: Sequence[str],
    url: str | None = None,
    *,
    path: str | None = None,
    roots: Iterable[str] = BINARY_ROOTS,
) -> int:
    """Run ``command`` with PostgreSQL at ``url`` (default: ``X402MW_TEST_POSTGRES_URL``); its exit code,
    or 2 when no server can be had."""
    url = url or os.environ.get("X402MW_TEST_POSTGRES_URL") or DEFAULT_URL
    env = dict(os.environ, X402MW_TEST_POSTGRES_URL=url)
    found, error = probe(url)
    if found is Probe.ANSWERS:
        return _run_command(command, env)
    shown = _hide_password(url)
    if found is Probe.REFUSES:
        return _refuse(f"A server listens at {shown} but refuses the connection: {error}\n{HOW_TO}")
    binaries = find_binaries(path, roots)
    if binaries is None:
        return _refuse(f"No PostgreSQL answers at {shown} and no PostgreSQL binaries were found.\n{HOW_TO}")
    user, problem = _service_user()
    if problem:
        return _refuse(f"No PostgreSQL answers at {shown}. {problem}\n{HOW_TO}")
    cluster = _Cluster(binaries, user)
    try:
        cluster.start()
        print(f"pg_cluster: no PostgreSQL at {shown}; started a throwaway cluster at {cluster.url}", file=sys.stderr)
        return _run_command(command, dict(env, X402MW_TEST_POSTGRES_URL=cluster.url))
    finally:
        cluster.stop()


def _hide_password(url: str) -> str:
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<the X402MW_TEST_POSTGRES_URL given>"


def _refuse(message: str) -> int:
    print(f"pg_cluster: {message}", file=sys.stderr)
    return 2


def _exit_on(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds through run's cleanup


def main(argv: Sequence[str]) -> int:
    command = list(argv[1:] if argv[:1] == ["--"] else argv)
    if not command:
        print("usage: python -m tests.pg_cluster -- COMMAND [ARG...]", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _exit_on)
    signal.signal(signal.SIGHUP, _exit_on)
    return run(command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
