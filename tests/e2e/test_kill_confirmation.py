"""How the kills hold their victims (labcore.procs.Held), on real processes, by pidfd
(Linux) and by psutil (elsewhere): the process's exit ends the wait and nothing
before it does, and once reaped it is out of reach of a kill through what held it;
and a whole worker's kill reaches no process that took its worker's pid."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from labcore.procs import Held, all_exited
from testbed.errors import RunFailure
from testbed.infra.supervisor import WorkerProcess
from testbed.nemesis.kills import HorseGone, Killer

WAYS = pytest.mark.parametrize("by_pidfd", [True, False], ids=["pidfd", "psutil"])


@WAYS
def test_the_wait_ends_when_the_process_exits_and_not_before(by_pidfd: bool) -> None:
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        with Held(sleeper.pid, by_pidfd=by_pidfd) as held:
            assert not held.reaped
            assert not all_exited([held], 0.05)
            held.kill()
            assert all_exited([held], 5.0)
            assert sleeper.poll() == -signal.SIGKILL  # a zombie until reaped here, as the wait saw it
    finally:
        sleeper.kill()
        sleeper.wait()


@WAYS
def test_a_process_reaped_after_it_was_held_is_out_of_reach(by_pidfd: bool) -> None:
    done = subprocess.Popen(["true"])
    with Held(done.pid, by_pidfd=by_pidfd) as held:
        done.wait()
        assert all_exited([held], 0.0)
        held.kill()  # reaches nobody, and says nothing


@WAYS
def test_a_held_process_is_known_by_its_start_time_until_it_is_gone(by_pidfd: bool) -> None:
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        with Held(sleeper.pid, by_pidfd=by_pidfd) as held:
            assert held.born() == psutil.Process(sleeper.pid).create_time() > 0
            sleeper.kill()
            sleeper.wait()
            assert held.born() == 0.0  # reaped while held: its pid may name another process now
    finally:
        sleeper.kill()
        sleeper.wait()
    with Held(sleeper.pid, by_pidfd=by_pidfd) as gone:  # reaped before it was held
        assert gone.reaped and gone.born() == 0.0


def test_a_pidfd_of_a_reaped_process_signals_nobody() -> None:
    # What `Held.kill` relies on: the kernel refuses, where a signal by pid would reach whoever has it now.
    done = subprocess.Popen(["true"])
    with Held(done.pid, by_pidfd=True) as held:
        done.wait()
        assert held._fd is not None
        with pytest.raises(ProcessLookupError):
            signal.pidfd_send_signal(held._fd, signal.SIGKILL)


class _Found:
    """The supervisor's answer to whose work-horse a pid is, as it read it (`Supervisor.owner_of`)."""

    def __init__(self, owner: WorkerProcess) -> None:
        self._owner = owner

    def owner_of(self, horse_pid: int) -> WorkerProcess:
        return self._owner


def test_a_whole_worker_kill_spares_a_process_that_took_the_workers_pid(tmp_path: Path) -> None:
    # A worker and its work-horse; and a stranger holding the pid the supervisor read as the
    # worker's, as if the worker had died and its pid gone to another process before it was held.
    worker = subprocess.Popen(["sh", "-c", "sleep 30 & wait"])
    stranger = horse = None
    try:
        deadline = time.monotonic() + 5
        while not (children := psutil.Process(worker.pid).children()):
            assert time.monotonic() < deadline, "the work-horse did not start"
            time.sleep(0.01)
        horse = children[0]
        time.sleep(0.05)  # past the clock's tick: a start time is counted in hundredths of a second
        stranger = subprocess.Popen(["sleep", "30"])
        stale = WorkerProcess("w1", stranger, tmp_path / "w1.log")  # type: ignore[arg-type]
        with pytest.raises(RunFailure, match=f"refusing to kill pid {stranger.pid}: born after its work-horse"):
            Killer(_Found(stale), None).kill(horse.pid, whole_worker=True)  # type: ignore[arg-type]
        assert stranger.poll() is None and worker.poll() is None and horse.is_running()
        # The worker it read is the work-horse's parent: both die.
        found = WorkerProcess("w1", worker, tmp_path / "w1.log")  # type: ignore[arg-type]
        kill = Killer(_Found(found), None).kill(horse.pid, whole_worker=True)  # type: ignore[arg-type]
        assert kill.victims == [worker.pid, horse.pid] and not kill.already_gone
        assert worker.wait(5) == -signal.SIGKILL and stranger.poll() is None
    finally:
        if horse is not None:
            with contextlib.suppress(psutil.NoSuchProcess):
                horse.kill()
        for proc in (worker, stranger):
            if proc is not None:
                proc.kill()
                proc.wait()


class _Nobody:
    """A supervisor none of whose workers a pid is the work-horse of."""

    def owner_of(self, horse_pid: int) -> None:
        return None


def test_a_kill_tells_a_work_horse_already_reaped_from_a_process_not_ours() -> None:
    done = subprocess.Popen(["true"])
    done.wait()  # exited and reaped: as a work-horse whose client gave up, reaped by its worker
    with pytest.raises(HorseGone, match=f"pid {done.pid} had exited and been reaped before the kill"):
        Killer(_Nobody(), None).kill(done.pid, whole_worker=False)  # type: ignore[arg-type]
    stranger = subprocess.Popen(["sleep", "30"])
    try:  # alive, and no work-horse of this run's workers: refused as ever, and spared
        with pytest.raises(RunFailure, match=f"refusing to kill pid {stranger.pid}: not a work-horse") as refused:
            Killer(_Nobody(), None).kill(stranger.pid, whole_worker=False)  # type: ignore[arg-type]
        assert not isinstance(refused.value, HorseGone) and stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()
