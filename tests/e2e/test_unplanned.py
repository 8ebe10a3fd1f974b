"""What the plan did not make is the lab's failure, never a verdict: a client that times out
where no timeout was armed, a work-horse killed from outside the lab. The cell is withheld
and the run exits 3, naming the anomaly (issue 58)."""

from __future__ import annotations

import contextlib
import signal
import time
from pathlib import Path

import psutil
import pytest

from tests.support.helpers import Ran, assert_left_nothing, finish, run_testbed, start_testbed

pytestmark = pytest.mark.e2e


def _withheld(ran: Ran, anomaly: str) -> None:
    """Exit 3 naming the anomaly, the row withheld, and nothing said of the job."""
    assert ran.code == 3, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert "verdict withheld, the lab saw what the plan did not make: 1 cell(s) withheld" in ran.stderr
    assert anomaly in ran.stderr, ran.stderr
    (row,) = ran.json["rows"]
    assert row["verdict"] == "withheld" and any(anomaly in d for d in row["differences"]), row["differences"]
    assert ran.json["incomplete"] and ran.json["verdict"] == "incomplete"
    said = ran.stdout + ran.stderr
    assert "WITHHELD" in ran.stderr, ran.stderr  # the cell's line as it was judged
    assert "DIFFERS" not in said and "duplicated" not in said and "duplicates work" not in said
    assert_left_nothing(ran)


def test_a_client_timeout_nobody_armed_on_a_busy_machine_is_withheld(
    workdir: Path, busy_cores: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A job with a 0.2 s client timeout and no key: a timeout after the provider applied the
    # effect would make its retry a duplicate, a "finding" the machine made. Under the burners
    # a timeout may fire or not; the provider stopped during one send makes one fire for sure.
    monkeypatch.setenv("PAUSE_ONCE", str(workdir / "paused"))
    args = ["--handler", "tests.support.userjobs:times_out_once", "-b", "none", "--ops", "4", "--no-store"]
    ran = run_testbed(args, workdir, timeout=120)
    _withheld(ran, "attempt 1: its client timed out on the provider (ReadTimeout")
    assert "where the plan made no fault" in ran.stderr
    assert "; a user's job's client keeps its own timeout (raise it there)" in ran.stderr  # the bounds, said


def test_a_work_horse_killed_from_outside_is_withheld(workdir: Path) -> None:
    args = ["--handler", "tests.support.userjobs:sleeps_then_sends", "-b", "none", "--ops", "4", "--no-store"]
    proc, _, _ = start_testbed(args, workdir)
    horse = None
    try:
        deadline = time.monotonic() + 60
        while horse is None and proc.poll() is None:
            assert time.monotonic() < deadline, "no work-horse started"
            horse = _a_work_horse(psutil.Process(proc.pid))
            time.sleep(0.05)
        assert horse is not None, "the run ended before a work-horse was seen"
        horse.send_signal(signal.SIGKILL)  # as the OOM killer would
    finally:
        ran = finish(proc, workdir, timeout=120)
    _withheld(ran, f"its work-horse (pid {horse.pid}) died of SIGKILL with no kill of the plan")


def _a_work_horse(run: psutil.Process) -> psutil.Process | None:
    """A work-horse of the run's workers: a fork of an RQ worker (its command line), which is a
    fork of the run's zygote, running the job."""
    with contextlib.suppress(psutil.NoSuchProcess):
        for process in run.children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                worker = process.parent()
                zygote = worker.parent() if worker is not None else None
                if worker is None or zygote is None:
                    continue
                if process.cmdline() == worker.cmdline() == zygote.cmdline():
                    return process
    return None


def test_a_kill_whose_attempt_had_already_ended_is_withheld_saying_so(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The job's client gives up after 0.01 s while the provider holds its request at the
    # boundary; the lab is stopped meanwhile, so the work-horse has exited and been reaped
    # by its worker before the lab comes to kill it.
    paused = workdir / "paused"
    monkeypatch.setenv("PAUSE_LAB", str(paused))
    handler = "tests.support.userjobs:gives_up_while_the_lab_stops"
    proc, _, _ = start_testbed(["--handler", handler, "-b", "after-effect", "--every", "1", "--ops", "1"], workdir)
    try:
        deadline = time.monotonic() + 60
        while not paused.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the job did not stop the run"
            time.sleep(0.02)
        lab, horse = map(int, paused.read_text().split())
        while psutil.pid_exists(horse):  # reaped by its worker, not only exited
            assert time.monotonic() < deadline, "the work-horse did not end"
            time.sleep(0.02)
    finally:
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(proc.pid).resume()
        ran = finish(proc, workdir, timeout=120)
    assert lab == proc.pid
    anomaly = ":1 attempt 1: the attempt ended before the kill at after-effect (its client gave up on the provider"
    _withheld(ran, anomaly)
    assert "read timeout=0.01" in ran.stderr  # its own words for why it gave up
    assert "lab's hold must stay inside the job's client timeout" in ran.stderr
    assert "refusing to kill" not in ran.stderr
