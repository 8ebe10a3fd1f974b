"""The pytest plugin as a user meets it: their job and their test, in their own pytest run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import pytest

from tests.support.helpers import descendants, left_alive, still_running

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]

JOB = """\
import os

import requests


def send(op_id, payload):
    response = requests.post(f"{os.environ['TESTBED_PROVIDER_URL']}/api/emails", json=payload, timeout=2)
    response.raise_for_status()
    return response.json()["id"]
"""

TESTS = """\
def test_send_is_exactly_once(lab):
    rows = lab.run("myjob:send", boundaries=["before-effect", "after-effect"], ops=20)
    rows.assert_exactly_once()


def test_send_is_at_least_once(lab):
    rows = lab.run("myjob:send", boundaries=["before-effect", "after-effect"], ops=20)
    rows.assert_at_least_once()
    assert rows.row("after-effect").counts.duplicate_effects == 2
"""


def _plugin_args() -> list[str]:
    """Installed with its entry point, pytest loads the plugin by itself; an environment
    installed before the entry point existed names it."""
    points = metadata.entry_points(group="pytest11")
    return [] if any(p.value == "testbed.plugin" for p in points) else ["-p", "testbed.plugin"]


def test_a_users_test_of_their_own_job(tmp_path: Path) -> None:
    (tmp_path / "myjob.py").write_text(JOB)
    (tmp_path / "test_myjob.py").write_text(TESTS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("RQ_KEY_PREFIX", None)  # this session's: the user's run claims its own
    argv = [sys.executable, "-m", "pytest", *_plugin_args(), "-p", "no:cacheprovider", "-q", "test_myjob.py"]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: set[tuple[int, float]] = set()
    deadline = time.monotonic() + 240
    while proc.poll() is None and time.monotonic() < deadline:
        seen |= descendants(proc.pid)
        time.sleep(0.05)
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 1, out
    assert "1 failed, 1 passed" in out
    assert "exactly-once does not hold:" in out
    assert "myjob:send @ after-effect (kill): exactly-once: 2 ops duplicated" in out
    assert ":tenant-demo:notification:10: duplicated: the provider recorded 2 effects from 2 requests" in out
    assert "myjob:send  20 / 0         22 / 0 !" in out  # the run's table, under the failure
    assert "plugin.py" not in out  # the failure points at the user's test, not at the plugin
    assert len(seen) >= 4 and still_running(seen) == []


def test_the_plugin_reports_the_processes_a_job_leaves(tmp_path: Path) -> None:
    """What the job leaves in its work-horse's group is its run's and its row's, once the workers
    have counted it; what leaves the group is found, and said, as the lab stops."""
    from testbed.plugin import LeftoverProcesses, started_lab

    pids = tmp_path / "pids"
    pids.mkdir()
    job = "tests.support.userjobs:leaves_a_process"
    with pytest.warns(LeftoverProcesses) as warned:
        with started_lab(paths=[str(ROOT)], workers=2) as lab:
            rows = lab.run(job, boundaries=["none"], ops=4, env={"LEFTOVER_PIDS": str(pids)}, paths=[str(ROOT)])
            assert (rows.leftovers, rows.row().leftovers) == (4, 4)  # one per op in its group
            assert len(list(pids.iterdir())) == 8
        assert left_alive(pids) == []
    assert [str(w.message) for w in warned] == [
        f"the jobs left 4 process(es) running after their attempts: stopped ({job} @ none: 4)",
        "the jobs left 4 process(es) running after their attempts: stopped"
        " (found as the lab stopped: they left their work-horses)",
    ]
