"""Fixtures shared by the tests; what else they share lives in tests/support/."""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import testbed.plugin
from testbed.infra.redis_server import PrivateRedis
from tests.support import namespaces
from tests.support.helpers import BackgroundRuns, Ran, run_testbed, start_testbed


def pytest_configure(config: pytest.Config) -> None:
    # An environment installed before the plugin's entry point existed: register it by hand.
    if not config.pluginmanager.is_registered(testbed.plugin):
        config.pluginmanager.register(testbed.plugin, "testbed")
    # A suite started in the background (`cmd &`, nohup) inherits SIGINT ignored, and every
    # testbed it starts would too: the Ctrl-C tests would find their SIGINT ignored. A
    # handler (not SIG_IGN) is reset to the default in each child it execs.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def short_dir() -> Path:
    """A dir whose runs' private Redis and provider take their unix sockets, as a user's
    runs do: under pytest's own temp dirs a socket's path passes the 100 bytes a run
    allows it (testbed/infra/redis_server.py) and the run falls back to TCP."""
    return Path(tempfile.mkdtemp(prefix="tb-"))


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = short_dir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def busy_cores() -> Iterator[int]:
    """One busy-loop process per core, for as long as the test runs."""
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
        for _ in range(os.cpu_count() or 2)
    ]
    yield len(hogs)
    for hog in hogs:
        hog.kill()
        hog.wait()


@pytest.fixture
def private_redis_url(tmp_path: Path) -> Iterator[str]:
    """A Redis server of the test's own, as a run starts it (its URL holds the password)."""
    server = PrivateRedis(tmp_path)
    yield server.start()
    server.stop()


@pytest.fixture
def private_redis(private_redis_url: str) -> Iterator[redis.Redis]:
    """A client of the test's own Redis server."""
    client = redis.Redis.from_url(private_redis_url)
    yield client
    client.close()


@pytest.fixture(scope="session")
def default_chaos(tmp_path_factory: pytest.TempPathFactory) -> Ran:
    """`testbed chaos` with no arguments on one host, once per session: the article's
    table, and what the run across hosts must equal."""
    return run_testbed([], tmp_path_factory.mktemp("default"))


@pytest.fixture(scope="session", autouse=True)
def background_runs(request: pytest.FixtureRequest) -> Iterator[BackgroundRuns]:
    """Runs that mostly wait (RQ's own recovery waits out a 65 s expiry) start
    with the session, so that their wait overlaps the other tests; a test marked
    `background(name, command, *args)` collects its run with `finish`. Only the
    runs of selected tests start; each is stopped at the end, finished or not.
    Under pytest-xdist every worker starts them, since none can know which tests
    it will be given: the wait is what overlaps, and a run left unused is stopped
    at the end like the others."""
    runs: BackgroundRuns = {}
    for item in request.session.items:
        marker = item.get_closest_marker("background")
        if marker is not None and marker.args[0] not in runs:
            name, command, *args = marker.args
            workdir = short_dir()
            proc, _, _ = start_testbed(list(args), workdir, command)
            runs[name] = (proc, workdir)
    yield runs
    for proc, _ in runs.values():
        if proc.poll() is None:
            proc.terminate()  # the run stops everything it started (SIGTERM is handled as Ctrl-C)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(30)
        if proc.poll() is None:
            proc.kill()
    for _, workdir in runs.values():
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[namespaces.Hosts]:
    """Redis, the provider, the worker hosts and the lab, each in a network namespace of its
    own (tests/support/namespaces.py), for one test module; skipped where namespaces cannot be made."""
    reason = namespaces.why_not()
    if reason:
        pytest.skip(reason)
    with namespaces.running(tmp_path_factory.mktemp("hosts")) as made:
        yield made
