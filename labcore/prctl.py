"""This process's own settings in the kernel (Linux's prctl): the signal it gets
when its parent dies, whether it adopts its orphaned descendants (and stops
them), and the name `ps` shows for it.

Apart from `labcore.procs` (starting and stopping the run's processes, with
psutil) because the workers and their work-horses need only this: what a
worker holds resident, it hands to every work-horse it forks, and the kernel
copies the page tables of all of it at each fork and tears them down at each
exit (`bench/profile/fork_cost.py` measures what a page costs), and psutil's
import is large. For the same reason it is the exec wrapper of the
run's non-Python children (`labcore.procs.guarded`): an interpreter that
only sets the death signal and execs, without importing psutil.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
_PR_SET_CHILD_SUBREAPER = 36
# Loaded once: work-horses call this on every job and inherit the handle.
_prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def die_with_parent(parent_pid: int | None) -> None:
    """Linux only: be SIGKILLed when the process that started us dies."""
    if parent_pid is None or _prctl is None:
        return
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before the request took hold
        os._exit(1)


def adopt_orphans() -> None:
    """Linux only: a process below this one whose parent dies becomes this process's child
    (not init's), wherever it went: it stays found below this process."""
    if _prctl is not None:
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def stop_adopted() -> None:
    """Linux only: SIGKILL every child of this process and reap it, until none is left. With
    `adopt_orphans`, as each dies its own children become this process's, and go the same
    way: nothing started below this process outlives it, whatever session it went to. A
    child keeps its pid until it is reaped, so no signal reaches a process given that pid."""
    if _prctl is None:
        return
    while children := _children():
        for pid in children:
            os.kill(pid, signal.SIGKILL)
        for pid in children:
            with contextlib.suppress(ChildProcessError):  # reaped already: its module ignores SIGCHLD
                os.waitpid(pid, 0)


def _children() -> list[int]:
    """This process's children, zombies included, from /proc (psutil stays out of the workers)."""
    me, found = os.getpid(), []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as stat:
                    # pid (comm) state ppid ...: the name may hold spaces and parentheses.
                    ppid = int(stat.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
            if ppid == me:
                found.append(int(entry.name))
    return found


def set_name(name: str) -> None:
    """Linux only: the name `ps -o comm`, `top` and psutil give this process (its first
    15 bytes). A process forked without exec keeps its parent's command line: this
    tells it apart."""
    if _prctl is not None:
        _prctl(_PR_SET_NAME, name.encode()[:15])


if __name__ == "__main__":
    # Exec wrapper: `python -m labcore.prctl <parent-pid> program args...`
    die_with_parent(int(sys.argv[1]))
    os.execvp(sys.argv[2], sys.argv[2:])
