"""The kills' pidfds (labcore.procs) on real processes: the process's exit ends the
wait and nothing before it does, and once reaped it is out of reach of a signal
sent through its old pidfd, whoever takes its pid next."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from labcore.procs import exited, pidfd


def test_the_wait_ends_when_the_process_exits_and_not_before():
    sleeper = subprocess.Popen(["sleep", "30"])
    fd = pidfd(sleeper.pid)
    assert fd is not None
    try:
        assert not exited([fd], 0.05)
        signal.pidfd_send_signal(fd, signal.SIGKILL)
        assert exited([fd], 5.0)
        assert sleeper.poll() == -signal.SIGKILL  # a zombie until reaped here, as the wait saw it
    finally:
        os.close(fd)
        sleeper.kill()
        sleeper.wait()


def test_a_reaped_process_is_out_of_reach_of_its_old_pidfd():
    done = subprocess.Popen(["true"])
    fd = pidfd(done.pid)
    assert fd is not None
    try:
        done.wait()
        assert exited([fd], 0.0)
        with pytest.raises(ProcessLookupError):
            signal.pidfd_send_signal(fd, signal.SIGKILL)
    finally:
        os.close(fd)
