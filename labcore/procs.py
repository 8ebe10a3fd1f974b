"""Starting and stopping the processes of a run, so that none outlives it.

Children run in their own sessions (a Ctrl-C in the terminal reaches only the
testbed, which then stops them in order) and ask the kernel to SIGKILL them
if the testbed itself dies without cleaning up (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import contextlib
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


def spawn(
    argv: Sequence[str],
    log: Path,
    env: dict[str, str] | None = None,
    piped: bool = False,
    pass_fds: Sequence[int] = (),
) -> subprocess.Popen[bytes]:
    """Start a child that dies with us. Non-Python programs go through
    `labcore.prctl`'s exec wrapper (`guarded`) so the death signal is set before they start.
    `piped`: its stdin and stdout are pipes to us (a child we talk to), only
    its stderr goes to the log. `pass_fds`: descriptors the child inherits (listening sockets)."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE if piped else subprocess.DEVNULL,
            stdout=subprocess.PIPE if piped else out,
            stderr=out if piped else subprocess.STDOUT,
            env=env,
            start_new_session=True,
            pass_fds=pass_fds,
        )


def guarded(argv: Sequence[str]) -> list[str]:
    """argv wrapped so that it is SIGKILLed if this process dies first."""
    return [sys.executable, "-m", "labcore.prctl", str(os.getpid()), *argv]


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


_PIDFD = hasattr(os, "pidfd_open")  # Linux 5.3+


class Held:
    """A process held from before the run checks that it is its own until its exit is
    confirmed (`all_exited`), and let go as its `with` block ends. On Linux through a
    pidfd: a signal sent through it reaches that process or nobody, never one given its
    pid once it is reaped, and its exit wakes the wait. Elsewhere through psutil, which
    checks that the pid still names the process it held (its start time) just before it
    signals, and reads its status until it is gone."""

    def __init__(self, pid: int, by_pidfd: bool = _PIDFD) -> None:
        self.pid = pid
        self._fd: int | None = None
        self._proc: psutil.Process | None = None
        with contextlib.suppress(ProcessLookupError, psutil.NoSuchProcess):
            if by_pidfd:
                self._fd = os.pidfd_open(pid)
            else:
                self._proc = psutil.Process(pid)
        self.reaped = self._fd is None and self._proc is None  # nothing to hold: exited and reaped

    def born(self) -> float:
        """When the held process started; 0 once it is gone (reaped), when a kill through
        what holds it reaches nobody. Through a pidfd the time is read by pid, and counts
        only if the pidfd still reaches the process after the read: until it is reaped,
        the pid is its own."""
        try:
            if self._fd is not None:
                started = psutil.Process(self.pid).create_time()
                signal.pidfd_send_signal(self._fd, 0)  # raises once it is reaped
                return started
            if self._proc is not None and self._proc.is_running():  # psutil compares start times
                return self._proc.create_time()
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass
        return 0.0

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, psutil.NoSuchProcess):  # reaped since it was held
            if self._fd is not None:
                signal.pidfd_send_signal(self._fd, signal.SIGKILL)
            elif self._proc is not None:
                self._proc.kill()

    def __enter__(self) -> Held:
        return self

    def __exit__(self, *_: object) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _exited(self) -> bool:
        """Without waiting (psutil's side): gone, or a zombie waiting to be reaped."""
        try:
            return self._proc is None or self._proc.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True


def all_exited(held: Sequence[Held], timeout: float) -> bool:
    """Whether every held process has exited (a zombie has) within `timeout`. Pidfds are
    waited on (the kernel wakes the wait as each exits); the others are looked at every
    millisecond."""
    waiting = select.poll()
    fds = {h._fd for h in held if h._fd is not None}
    for fd in fds:
        waiting.register(fd, select.POLLIN)
    looked_at = [h for h in held if h._fd is None]
    deadline = time.monotonic() + timeout
    pause = 0.0  # the first look does not wait
    while True:
        if fds:
            for fd, _ in waiting.poll(pause * 1000):
                waiting.unregister(fd)
                fds.discard(fd)
        elif pause:
            time.sleep(pause)
        looked_at = [h for h in looked_at if not h._exited()]
        if not fds and not looked_at:
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        pause = min(left, 0.001) if looked_at else left


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def stop_descendants(pid: int, grace: float = 5.0) -> int:
    """SIGKILL every live process below `pid`, and wait for them; how many there were."""
    try:
        below = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return 0
    killed = []
    for child in below:
        with contextlib.suppress(psutil.NoSuchProcess):
            if child.status() != psutil.STATUS_ZOMBIE:
                child.kill()  # psutil checks that the pid is still this process's
                killed.append(child)
    psutil.wait_procs(killed, timeout=grace)
    return len(killed)


def stop_session(sid: int) -> int:
    """SIGKILL every live process left in the session a process of ours led, once that
    process is reaped; how many there were. A session outlives its leader only while it
    has a member, and no process can be given its id meanwhile; each process is held
    (`Held`) from before its session is read to its signal."""
    count = 0
    for pid in psutil.pids():
        with contextlib.suppress(OSError, psutil.Error), Held(pid) as held:
            if os.getsid(pid) == sid and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                held.kill()
                count += 1
    return count
