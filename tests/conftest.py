"""Shared fixtures: real platforms (uvicorn on loopback) on the in-process dev chain and on anvil,
on SQLite or on PostgreSQL; merchants with API keys and agent endpoints; funded agent wallets.

Which database a test runs on: every test that reaches the ``database`` fixture (``dev_platform``,
``anvil_platform``, ``any_chain_platform``, ``deployment``, ``quiet_dev_platform`` and the
fixtures of files that start platforms of their own) runs on **SQLite**, its id ending in
``[sqlite]``, unless it is marked ``both_databases`` (on the test, or for a whole file as its
``pytestmark``): then it runs once per database, ids ending in ``sqlite`` and ``postgresql``. The
rule for marking: the test is about something the two databases do differently, and says why next
to the mark:

- concurrency and locking: races of requests or processes on one row (idempotency keys, one
  authorization or order paid once, concurrent refunds, settlement recovery and takeover, the
  workers' claims, relayer leases, the webhook outbox's fan-out);
- the SQL dialect: what PostgreSQL refuses where SQLite stores it (NUL characters, numbers past a
  column's range, time zones), and upserts;
- PostgreSQL's own machinery: LISTEN/NOTIFY (the key cache and key revocation), its pooled and held
  connections, migrations (tests/integration/test_schema.py, test_engine.py).

A test that is about PostgreSQL alone pins it (``@pytest.mark.parametrize("database",
["postgresql"], indirect=True)``); a test that never reaches its platform's database pins SQLite
(`tests.harness.sqlite_only`). ``pytest --all-databases`` runs every test on both databases, as
the suite did before this rule (for a change to the database layer).

Which chain: ``any_chain_platform`` runs a test on the dev chain and on anvil. A test parametrised
by something the chain never sees (the seller's web framework) pairs each value with one chain
(`tests.harness.each_on_one_chain`), so that every value runs and both chains run.

PostgreSQL is found at ``X402MW_TEST_POSTGRES_URL`` (``make test`` starts a throwaway cluster where
none answers: see ``tests/pg_cluster.py``); each platform gets a fresh database there, dropped at
the end.
"""

from __future__ import annotations

import os

os.environ.setdefault("ETH_HASH_BACKEND", "pysha3")

import contextlib
from collections.abc import Iterator

import pytest

from tests import answers
from tests.harness import (
    DATABASES,
    Deployment,
    PlatformHarness,
    postgres_database,
    start_anvil_platform,
    start_dev_platform,
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _Platforms:
    """Platforms started on first use and kept until the session ends, one per (chain, database).

    xdist hands a worker tests of both databases in turn; keeping both platforms alive means a switch
    of the ``database`` parameter costs nothing instead of a platform restart."""

    def __init__(self, stack: contextlib.ExitStack, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._stack = stack
        self._tmp = tmp_path_factory
        self._started: dict[tuple[str, str], PlatformHarness] = {}

    def get(self, chain: str, database: str) -> PlatformHarness:
        """``chain`` is ``dev``, ``anvil`` or ``dev-without-worker`` (no background duties)."""
        if (chain, database) not in self._started:
            workdir = self._tmp.mktemp(f"{chain}-{database}-platform")
            url = self._stack.enter_context(postgres_database()) if database == "postgresql" else None
            if chain == "anvil":
                started = start_anvil_platform(workdir, database_url=url)
            else:
                started = start_dev_platform(workdir, database_url=url, run_worker=chain == "dev")
            self._started[chain, database] = self._stack.enter_context(started)
        return self._started[chain, database]


@pytest.fixture(scope="session")
def _platforms(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Platforms]:
    with contextlib.ExitStack() as stack:
        yield _Platforms(stack, tmp_path_factory)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--all-databases",
        action="store_true",
        help="run every test that takes a database on SQLite and on PostgreSQL, marked both_databases or not",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "both_databases: run on SQLite and on PostgreSQL (what the two do differently: see tests/conftest.py)",
    )


def _parametrised(metafunc: pytest.Metafunc, name: str) -> bool:
    """Whether the test's own ``parametrize`` marks already give ``name`` its values."""
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs.get("argnames", ())
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",")]
        if name in names:
            return True
    return False


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """The ``database`` of each test: SQLite, or both where marked ``both_databases`` (the module's
    docstring says which tests are)."""
    if "database" not in metafunc.fixturenames or _parametrised(metafunc, "database"):
        return
    both = metafunc.config.getoption("--all-databases") or metafunc.definition.get_closest_marker("both_databases")
    metafunc.parametrize("database", DATABASES if both else ["sqlite"], indirect=True, scope="session")


@pytest.fixture(scope="session")
def database(request: pytest.FixtureRequest) -> str:
    """The database under the platform fixtures: ``sqlite`` or ``postgresql`` (see the module's
    docstring for which a test gets)."""
    return str(request.param)


@pytest.fixture(scope="session")
def dev_platform(database: str, _platforms: _Platforms) -> PlatformHarness:
    """The platform on the in-process dev chain, on ``database``."""
    return _platforms.get("dev", database)


@pytest.fixture(scope="session")
def quiet_dev_platform(database: str, _platforms: _Platforms) -> PlatformHarness:
    """The platform on its own dev chain, without the background worker: for tests that run the
    worker's duties by hand (the deposit watcher), with nothing racing them, and that may rewind
    the chain (``evm_revert``) without disturbing other tests."""
    return _platforms.get("dev-without-worker", database)


@pytest.fixture(scope="session")
def anvil_platform(database: str, _platforms: _Platforms) -> PlatformHarness:
    """The platform on anvil, on ``database``."""
    return _platforms.get("anvil", database)


@pytest.fixture(params=["dev", "anvil"])
def any_chain_platform(request: pytest.FixtureRequest, database: str, _platforms: _Platforms) -> PlatformHarness:
    return _platforms.get(str(request.param), database)


@pytest.fixture
def deployment(dev_platform: PlatformHarness) -> Deployment:
    """A merchant on the dev-chain platform with a test key, a fixed-price endpoint and a funded agent."""
    return dev_platform.deploy()


# -- every JSON answer of the suite's platforms, against the OpenAPI document (tests/answers.py) ------

_checked = {"answers": 0, "problems": 0}
_covered: set[tuple[str, str, str]] = set()
_late: list[str] = []  # problems of answers given after the last test (checked at the session's end)


def _check_answers(start: int) -> tuple[int, list[str]]:
    """Check the answers recorded from the ``start``-th on; the index to start from next time, and
    what is wrong with them."""
    found = answers.recorded(start)
    schemas = answers.schemas() if found else None
    problems = [problem for answer in found for problem in schemas.problems(answer)] if schemas else []
    _checked["answers"] += len(found)
    _checked["problems"] += len(problems)
    if schemas is not None:
        _covered.update(schemas.covered)
    return start + len(found), problems


_next_answer = [0]


@pytest.fixture(autouse=True)
def _answers_keep_to_the_document() -> Iterator[None]:
    """Every JSON answer a platform gave during the test keeps to its schema in the OpenAPI document
    (a problem fails the test, at teardown)."""
    yield
    _next_answer[0], problems = _check_answers(_next_answer[0])
    if problems:
        pytest.fail("answers that do not keep to the OpenAPI document:\n" + "\n".join(problems[:20]))


def pytest_sessionfinish(session: pytest.Session) -> None:
    _next_answer[0], problems = _check_answers(_next_answer[0])
    _late.extend(problems)
    output = getattr(session.config, "workeroutput", None)
    if output is not None:  # an xdist worker: the controller sums them up
        output["answers"] = dict(_checked)
        output["covered"] = sorted(_covered)
        output["late"] = list(_late)
    elif _late:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    output = getattr(node, "workeroutput", {})
    for key, value in output.get("answers", {}).items():
        _checked[key] += value
    _covered.update(tuple(entry) for entry in output.get("covered", ()))
    _late.extend(output.get("late", ()))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _checked["answers"]:
        return
    documented = answers.schemas().documented
    if _late:
        terminalreporter.write_line("answers given after the last test that do not keep to the OpenAPI document:")
        for problem in _late[:20]:
            terminalreporter.write_line("  " + problem)
    terminalreporter.write_line(
        f"answers checked against the OpenAPI document: {_checked['answers']}, problems: {_checked['problems']}; "
        f"documented operation answers (operation, status) seen: {len(_covered & documented)} of {len(documented)}"
    )
