"""Files and numbers the lab is given are bounded: one line and exit 2 before any work,
never a hang, a traceback or all the memory."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.helpers import assert_left_nothing, run_testbed

pytestmark = pytest.mark.e2e


def _nested(path: Path) -> Path:
    path.write_text("[" * 200_000)
    return path


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _large(path: Path) -> Path:
    with path.open("wb") as out:
        out.truncate(100 << 20)  # 100 MB of nothing, sparse
    return path


def _zero(path: Path) -> Path:
    return Path("/dev/zero")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (_nested, "JSON nested deeper than 64 levels"),
        (_fifo, "not a regular file"),
        (_zero, "not a regular file"),
        (_large, "104,857,600 bytes, over the 1,048,576 the lab reads"),
    ],
)
def test_a_schedule_file_is_read_only_if_small_and_regular(
    workdir: Path, make: Callable[[Path], Path], message: str
) -> None:
    path = make(workdir / "schedule.json")
    ran = run_testbed(["--schedule", str(path), "-s", "reconcile"], workdir, timeout=60)
    assert ran.code == 2
    (line,) = ran.stderr.strip().splitlines()
    assert line.startswith("testbed: error: --schedule") and message in line, line
    assert "Traceback" not in ran.stderr + ran.stdout
    assert_left_nothing(ran)


def test_an_error_line_quotes_a_long_input_in_part(workdir: Path) -> None:
    name = "x" * 5000
    ran = run_testbed(["--schedule", str(workdir / name), "-s", "reconcile"], workdir, timeout=60)
    assert ran.code == 2
    (line,) = ran.stderr.strip().splitlines()
    assert len(line) < 600 and "characters)" in line, line


@pytest.mark.parametrize("option", ["--worker-ttl", "--maintenance-interval", "--job-monitoring-interval"])
def test_rq_timers_past_a_week_are_refused(workdir: Path, option: str) -> None:
    ran = run_testbed([option, "99999999999999999999", "--ops", "10"], workdir, timeout=60)
    assert ran.code == 2
    (line,) = ran.stderr.strip().splitlines()
    assert f"{option} must be from" in line and "to 604,800" in line, line
    assert ran.results is None
    assert_left_nothing(ran)


def _two_lines(path: Path) -> Path:
    path.write_text("a-secret-token\nand-another\n")
    return path


_TOKEN_COMMANDS = {
    # Each would go on to work (a Redis to reach, a port to serve) if the token file passed.
    "host": ["--redis-url", "redis://:pw@127.0.0.1:9/0", "--provider-token-file"],
    "provider": ["--db", "effects.sqlite3", "--port", "0", "--token-file"],
}


@pytest.mark.parametrize("command", sorted(_TOKEN_COMMANDS))
@pytest.mark.parametrize(
    ("make", "message"),
    [
        (_fifo, "a FIFO, not a regular file"),
        (_zero, "a device, not a regular file"),
        (_large, "104,857,600 bytes, over the 4,096 the lab reads"),
        (_two_lines, "2 lines, not a token of one line"),
    ],
)
def test_a_token_file_is_read_only_if_small_and_regular(
    workdir: Path, command: str, make: Callable[[Path], Path], message: str
) -> None:
    path = make(workdir / "token")
    option = _TOKEN_COMMANDS[command][-1]
    ran = run_testbed([*_TOKEN_COMMANDS[command], str(path)], workdir, timeout=60, command=command)
    assert ran.code == 2, ran.stderr
    (line,) = ran.stderr.strip().splitlines()
    assert line == f"testbed: error: {option} {path}: {message}", line
    assert not (workdir / "effects.sqlite3").exists()  # refused before any work
    assert_left_nothing(ran)
