"""A part of the stack that dies outside the plan is named: exit 3, one line, the
cells already judged kept (marked incomplete), nothing left behind."""

import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.helpers import (
    assert_left_nothing,
    descendants,
    finish,
    kill_part,
    run_testbed,
    start_testbed,
    still_running,
)

pytestmark = pytest.mark.e2e

ARGS = ["--ops", "300", "-s", "retry-only", "-s", "provider-key", "--parallel", "1"]


def start_and_wait_for_a_cell(workdir: Path) -> tuple[subprocess.Popen[bytes], set[tuple[int, float]]]:
    proc, _, err = start_testbed(ARGS, workdir)
    seen: set[tuple[int, float]] = set()
    deadline = time.monotonic() + 90
    while "/6] " not in err.read_text():  # the stack is up and a cell has been judged
        seen |= descendants(proc.pid)
        assert proc.poll() is None, err.read_text()
        assert time.monotonic() < deadline, "no cell finished"
        time.sleep(0.05)
    return proc, seen | descendants(proc.pid)


@pytest.mark.parametrize(
    ("marker", "named"),
    [
        ("redis-server", "the private redis-server"),
        ("-m provider", "the provider"),
        # Its workers die with it (PR_SET_PDEATHSIG): the run names the zygote, not one of them.
        ("-m workers.zygote", "the workers' zygote"),
    ],
)
def test_a_dead_part_is_named_and_finished_cells_are_kept(workdir: Path, marker: str, named: str) -> None:
    proc, seen = start_and_wait_for_a_cell(workdir)
    pid = kill_part(seen, marker)
    ran = finish(proc, workdir, timeout=60, seen=seen)
    assert ran.code == 3, ran.stderr
    last = ran.stderr.strip().splitlines()[-1]
    assert last.startswith("testbed: error: ") and "Traceback" not in ran.stderr
    assert f"{named} (pid {pid}) died during the run (killed by SIGKILL)" in last
    results = ran.json
    assert results["incomplete"] is True and named in results["failure"]
    assert len(results["rows"]) >= 1 and all(r["verdict"] == "pass" for r in results["rows"])
    assert len(results["rows"]) + len(results["notRun"]) == 6
    assert_left_nothing(ran)


def test_a_killed_testbed_takes_its_children_and_its_temp_dir_goes_with_the_next_run(workdir: Path) -> None:
    proc, seen = start_and_wait_for_a_cell(workdir)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 3  # the kernel's death signal, not a timeout of ours
    while still_running(seen) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert still_running(seen) == []
    left = list((workdir / "tmp").iterdir())
    assert len(left) == 1 and left[0].name.startswith("testbed-")
    again = run_testbed(["--ops", "5", "-s", "retry-only", "-b", "none"], workdir)
    assert again.code == 0, again.stderr
    assert_left_nothing(again)  # the dead run's dir went too
