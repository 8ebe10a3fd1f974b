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
