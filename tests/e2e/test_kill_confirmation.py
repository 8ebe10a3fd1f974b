"""How the kills hold their victims (labcore.procs.Held), on real processes, by pidfd
(Linux) and by psutil (elsewhere): the process's exit ends the wait and nothing
before it does, and once reaped it is out of reach of a kill through what held it."""

from __future__ import annotations

import signal
import subprocess

import pytest

from labcore.procs import Held, all_exited

WAYS = pytest.mark.parametrize("by_pidfd", [True, False], ids=["pidfd", "psutil"])


@WAYS
def test_the_wait_ends_when_the_process_exits_and_not_before(by_pidfd):
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
def test_a_process_reaped_after_it_was_held_is_out_of_reach(by_pidfd):
    done = subprocess.Popen(["true"])
    with Held(done.pid, by_pidfd=by_pidfd) as held:
        done.wait()
        assert all_exited([held], 0.0)
        held.kill()  # reaches nobody, and says nothing


def test_a_pidfd_of_a_reaped_process_signals_nobody():
    # What `Held.kill` relies on: the kernel refuses, where a signal by pid would reach whoever has it now.
    done = subprocess.Popen(["true"])
    with Held(done.pid, by_pidfd=True) as held:
        done.wait()
        assert held._fd is not None
        with pytest.raises(ProcessLookupError):
            signal.pidfd_send_signal(held._fd, signal.SIGKILL)
