"""Starting and stopping the processes of a run, so that none outlives it.

Children run in their own sessions (a Ctrl-C in the terminal reaches only the
testbed, which then stops them in order) and ask the kernel to SIGKILL them
if the testbed itself dies without cleaning up (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import psutil

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
# Loaded once: work-horses call this on every job and inherit the handle.
_prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def die_with_parent(parent_pid: int | None) -> None:
    """Linux only: be SIGKILLed when the process that started us dies."""
    if parent_pid is None or _prctl is None:
        return
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before the request took hold
        os._exit(1)


def set_name(name: str) -> None:
    """Linux only: the name `ps -o comm`, `top` and psutil give this process (its first
    15 bytes). A process forked without exec keeps its parent's command line: this
    tells it apart."""
    if _prctl is not None:
        _prctl(_PR_SET_NAME, name.encode()[:15])


def spawn(
    argv: Sequence[str], log: Path, env: dict[str, str] | None = None, piped: bool = False
) -> subprocess.Popen[bytes]:
    """Start a child that dies with us. Non-Python programs go through this
    module's exec wrapper so the death signal is set before they start.
    `piped`: its stdin and stdout are pipes to us (a child we talk to), only
    its stderr goes to the log."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE if piped else subprocess.DEVNULL,
            stdout=subprocess.PIPE if piped else out,
            stderr=out if piped else subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def guarded(argv: Sequence[str]) -> list[str]:
    """argv wrapped so that it is SIGKILLed if this process dies first."""
    return [sys.executable, "-m", "labcore.procs", str(os.getpid()), *argv]


def stop(proc: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    stop_all([proc], grace)


class Process(Protocol):
    """What the run asks of a process it started: a `subprocess.Popen`, or a worker
    forked by the run's zygote (testbed.infra.forks)."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, sig: int) -> None: ...

    def kill(self) -> None: ...


def stop_all(procs: Sequence[Process], grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL what is still running after `grace`. The processes'
    own children (work-horses) are SIGKILLed right after the SIGTERM: an RQ
    worker's warm shutdown waits for its job, and a job still running when a
    run stops is one that hangs or was cut short (a cell's timeout, Ctrl-C), so
    the wait would only ever end in the SIGKILL. Told to stop first, the worker
    reaps its horse and takes no new job; the children are confirmed gone last,
    once their parents, which reap them, have had their time."""
    running = [p for p in procs if p.poll() is None]
    family: list[psutil.Process] = []
    for proc in running:
        with contextlib.suppress(psutil.NoSuchProcess):
            family += psutil.Process(proc.pid).children(recursive=True)
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
    for child in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
    deadline = time.monotonic() + grace
    for proc in running:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
    psutil.wait_procs(family, timeout=grace)


def pidfd(pid: int) -> int | None:
    """A pidfd for the process that has `pid` now (Linux 5.3+), None if none has. A signal
    sent through it reaches that process or nothing, never a later one given the same pid
    once it is reaped; and it reads as ready once that process has exited (`exited`)."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return None


def exited(pidfds: Sequence[int], timeout: float) -> bool:
    """Whether every process behind `pidfds` has exited (a zombie has) within `timeout`:
    the kernel wakes the wait as each one exits, nothing is polled meanwhile."""
    waiting = select.poll()
    for fd in pidfds:
        waiting.register(fd, select.POLLIN)
    left = set(pidfds)
    deadline = time.monotonic() + timeout
    while left:
        for fd, _ in waiting.poll(max(0.0, deadline - time.monotonic()) * 1000):
            waiting.unregister(fd)
            left.discard(fd)
        if left and time.monotonic() >= deadline:
            return False
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


if __name__ == "__main__":
    # Exec wrapper: `python -m labcore.procs <parent-pid> program args...`
    die_with_parent(int(sys.argv[1]))
    os.execvp(sys.argv[2], sys.argv[2:])
