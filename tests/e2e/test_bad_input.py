"""Bad input: one clear line, a non-zero exit, no traceback, nothing started or written."""

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.helpers import assert_left_nothing, run_testbed

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--strategy", "nope"], "unknown strategy 'nope'"),
        (["--boundary", "somewhere"], "unknown boundary 'somewhere'"),
        (["--fault", "meteor"], "unknown fault 'meteor'"),
        (["--scenario", "sunny"], "unknown scenario 'sunny'"),
        (["--ops", "0"], "--ops must be from 1 to 10,000,000 (got 0)"),
        (["--every", "0"], "--every must be from 1"),
        (["--workers", "0"], "--workers must be from 1 to 64 (got 0)"),
        (["--retries", "-1"], "--retries must be from 0 to 10 (got -1)"),
        (["--ops", "many"], "Invalid value for '--ops'"),
        (["--fault", "timeout", "--boundary", "job-start"], "cannot be injected at job-start"),
        (["--expect", "retry-only=1/2"], "bad --expect"),
        (["--matrix", "huge"], "unknown matrix 'huge'"),
        (["--frobnicate"], "No such option"),
        (["--redis-private"], "--redis-private needs --redis-url"),
    ],
)
def test_usage_errors_exit_2_with_one_line(workdir: Path, args: list[str], message: str) -> None:
    ran = run_testbed(args, workdir, timeout=60)
    assert ran.code == 2
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1, ran.stderr
    assert lines[0].startswith("testbed: error:") and message in lines[0]
    assert "Traceback" not in ran.stderr + ran.stdout
    assert ran.results is None
    assert_left_nothing(ran)


def test_unreachable_redis_url(workdir: Path) -> None:
    ran = run_testbed(["--redis-url", "redis://127.0.0.1:1/0", "--ops", "5", "--every", "5"], workdir, timeout=60)
    assert ran.code == 2
    assert ran.stderr.strip().splitlines() == [ran.stderr.strip()]
    assert "cannot reach Redis at redis://127.0.0.1:1/0" in ran.stderr
    assert ran.results is None
    assert_left_nothing(ran)


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


def test_provider_port_in_use(workdir: Path, taken_port: int) -> None:
    port = taken_port
    ran = run_testbed(["--provider-port", str(port), "--ops", "5", "--every", "5"], workdir, timeout=60)
    assert ran.code == 2
    assert ran.stderr.strip() == f"testbed: error: provider port {port} is already in use"
    assert_left_nothing(ran)


def test_standalone_provider_port_in_use(workdir: Path, taken_port: int) -> None:
    port = taken_port
    ran = run_testbed(["--port", str(port), "--db", str(workdir / "p.sqlite3")], workdir, 60, "provider")
    assert ran.code == 2
    assert ran.stderr.strip() == f"testbed: error: provider port {port} is already in use"
    assert not (workdir / "p.sqlite3").exists()
