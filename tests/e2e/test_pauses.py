"""A slow part is not a fault: a part that stops and resumes changes no cell.

A VM's stolen time, a GC pause or a loaded CI runner stops a process for a while
without killing it. The run's provider, its Redis and one of its workers are each
SIGSTOPped for 10 s in the middle of a run, then let go: every cell is as the run
without a pause would have it, and nothing is left behind.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from tests.support.helpers import assert_left_nothing, finish, start_testbed

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PAUSE = 10.0  # seconds
# Still running when the pause begins (a paused provider, Redis or busy worker holds the
# run until it resumes), with a kill in every tenth op.
CELLS = ["-s", "provider-key", "-s", "retry-only", "-b", "none", "-b", "after-effect", "--ops", "100"]


def _provider(p: psutil.Process) -> bool:
    return p.cmdline()[1:3] == ["-m", "provider"]


def _redis(p: psutil.Process) -> bool:
    return p.name() == "redis-server"


def _worker(p: psutil.Process) -> bool:
    # A worker, not its work-horse (the zygote forks workers; a worker forks horses).
    parent = p.parent()
    assert parent is not None, p  # a child of the run: its parent is the zygote or a worker
    return p.name().startswith("rq-worker") and not parent.name().startswith("rq-worker")


def _part(root: int, which: Callable[[psutil.Process], bool]) -> psutil.Process:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for p in psutil.Process(root).children(recursive=True):
            try:
                if which(p):
                    return p
            except psutil.Error:
                continue
        time.sleep(0.05)
    raise AssertionError("the part never appeared")


@pytest.mark.parametrize("which", [_provider, _redis, _worker], ids=["provider", "redis", "worker"])
def test_a_part_paused_for_10_s_changes_no_cell(which: Callable[[psutil.Process], bool], tmp_path: Path) -> None:
    proc, _, _ = start_testbed(CELLS, tmp_path)
    seen: set[tuple[int, float]] = set()
    try:
        part = _part(proc.pid, which)
        time.sleep(0.5)  # the stack is up, or nearly: a pause at its start must change nothing either
        part.suspend()
        try:
            time.sleep(PAUSE)
        finally:
            # Redis and the provider hold the run until they resume; the other workers may
            # finish it, and the run then stops the paused one too.
            with contextlib.suppress(psutil.Error):
                part.resume()
        if which is not _worker:
            assert proc.poll() is None, "the run ended during the pause: it did not span it"
        ran = finish(proc, tmp_path, timeout=300, seen=seen)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert ran.code == 0, ran.stdout + ran.stderr
    for strategy in ("provider-key", "retry-only"):
        none = ran.row(strategy, "none")
        assert (none["effects"], none["duplicateEffects"], none["missingOperations"]) == (100, 0, 0), none
    key, retry = ran.row("provider-key", "after-effect"), ran.row("retry-only", "after-effect")
    assert (key["effects"], key["duplicateEffects"], key["missingOperations"]) == (100, 0, 0), key
    assert (retry["effects"], retry["duplicateEffects"]) == (110, 10), retry
    assert_left_nothing(ran)


def test_a_part_paused_past_the_cell_timeout_is_named(tmp_path: Path) -> None:
    """The bound on a pause is the cell's timeout (--cell-timeout): past it the run
    stops with exit 3 and names the part a signal stopped, never a verdict."""
    proc, _, err = start_testbed([*CELLS, "--cell-timeout", "5"], tmp_path)
    try:
        part = _part(proc.pid, _provider)
        # Once the cells are under way: paused before, the lab's own calls to the provider
        # (a cell's contract) would wait out their own bound (60 s) first.
        deadline = time.monotonic() + 60
        while "testbed run " not in err.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        part.suspend()
        ran = finish(proc, tmp_path, timeout=120)
    finally:
        with contextlib.suppress(psutil.Error):
            part.resume()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert ran.code == 3, ran.stdout + ran.stderr
    assert f"the provider (pid {part.pid}) stopped by a signal" in ran.stderr, ran.stderr
    assert_left_nothing(ran)
