"""The machine's resources running out are the lab's failure, never a verdict: a temp dir
that fills up ends the run with exit 3 naming it, and a descriptor limit too low for the
run is raised, or refused before any work."""

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.helpers import TESTBED, run_testbed

pytestmark = pytest.mark.e2e


@contextlib.contextmanager
def tiny_tmpfs(where: Path) -> Iterator[None]:
    """A 1 MB tmpfs mounted at `where` (the run's TMPDIR), unmounted on leaving."""
    where.mkdir(exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


def test_a_full_temp_dir_is_the_labs_failure_not_the_jobs(workdir: Path) -> None:
    """The provider cannot write its log and answers 500: the run names that and exits 3,
    the jobs that failed on it scored against nothing; the stored run checks as incomplete."""
    with tiny_tmpfs(workdir / "tmp"):
        ran = run_testbed(["-s", "provider-key", "-b", "none", "--ops", "400"], workdir, timeout=120)
    assert ran.code == 3, ran.stderr + ran.stdout
    assert "the provider could not write its log: database or disk is full" in ran.stderr
    assert "DIFFERS" not in ran.stdout
    assert ran.json["incomplete"] is True
    checked = subprocess.run([*TESTBED, "check", "latest"], cwd=workdir, capture_output=True, text=True, timeout=60)
    assert checked.returncode == 3, checked.stderr
    assert "could not write its log" in checked.stderr


def _under_prlimit(nofile: str, workdir: Path) -> subprocess.CompletedProcess[str]:
    if shutil.which("prlimit") is None:
        pytest.skip("no prlimit")
    argv = ["prlimit", f"--nofile={nofile}", "--", *TESTBED, "chaos", "--no-store", "-s", "provider-key", "-b", "none"]
    env = {**os.environ, "TMPDIR": str(workdir)}
    env.pop("REDIS_URL", None)
    return subprocess.run([*argv, "--ops", "50"], cwd=workdir, env=env, capture_output=True, text=True, timeout=120)


def test_a_hard_descriptor_limit_too_low_is_refused_before_any_work(workdir: Path) -> None:
    ran = _under_prlimit("64", workdir)
    assert ran.returncode == 2, ran.stderr + ran.stdout
    assert ran.stderr.strip().splitlines() == [
        "testbed: error: a run with 4 worker(s) needs 80 open files per process; the limit is 64 (hard 64):"
        " raise it (ulimit -n 80) or run fewer --workers"
    ]
    assert list(workdir.iterdir()) == []  # nothing started: no temp dir, no results


def test_a_soft_descriptor_limit_too_low_is_raised(workdir: Path) -> None:
    ran = _under_prlimit("64:4096", workdir)
    assert ran.returncode == 0, ran.stderr + ran.stdout
    assert "1/1 cells as expected" in ran.stdout
