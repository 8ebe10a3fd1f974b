"""What a work-horse may leave behind once it has ended, and what the worker does about it.

RQ puts each work-horse in a process group of its own (`os.setpgrp`, the group's
id the horse's pid). Whatever a job starts and does not wait for (a process
forked per call, a subprocess) stays in that group and outlives the horse: the
worker stops the group's members as soon as it has reaped the horse, before it
takes another job, and says how many there were (`stop_group`). A process that
leaves the group (a daemon's `setsid`) is found at the run's end instead, in the
session of the run's workers (`testbed.infra.supervisor`).

A Celery pool child is no work-horse: it runs task after task, in its worker's
process group (`workers.zygote` gives each worker one). What a task left is
what the group holds once the task has returned, besides the worker, the pool
child and what the pool child found there as it started (what a killed
predecessor left, found at the run's end), and the pool child's own children
that left the group; the pool child stops it before it takes another task
(`stop_strays`).

A work-horse writes to its worker's log; what it writes beyond OUTPUT_CAP bytes
in one attempt is cut from the middle once it has ended (`cap_output`): its
first and last lines stay, with a line saying how much went between them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
from collections.abc import Iterable, Set
from dataclasses import dataclass

OUTPUT_CAP = 65_536  # bytes of one work-horse's output kept in its worker's log


def stop_group(pgid: int) -> int:
    """SIGKILL every process left in a reaped work-horse's group; how many there were
    (the dead not waited for by anyone, zombies, are not counted). A group outlives its
    leader only while it has a member, and no process can be given its id meanwhile: the
    signal reaches the horse's leftovers or nobody. Where nothing was left, which is
    nearly always, this costs one system call."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return 0
    except PermissionError:  # a member of another user's (a setuid program): counted, not stoppable
        pass
    members = len(live_members(pgid))
    if members:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    return members


def last_pid() -> int:
    """The pid this pid namespace gave last: a process started after this is read has a greater
    one, unless the pids wrapped around to the lowest free meanwhile."""
    with open("/proc/sys/kernel/ns_last_pid", "rb") as file:
        return int(file.read())


def stop_strays(spared: Set[int], since: int) -> int:
    """SIGKILL every process in this process's group but the `spared` (this process, its
    parent, and those it found there as it began), and every child of this process that
    left the group, started since `last_pid` was `since`; how many there were. A Celery
    pool child shares its group with its worker and outlives its task
    (`workers.engines.celery`): what a task left is what is there besides them once the
    task has returned, and its own children, whose parent the pool child still is (the
    lab's stop of the worker would kill them uncounted). Only the pids given since are
    read, which are a few, not every process's: all of them if the pids wrapped around.
    A stray that ends between the listing and the signal leaves its pid to another
    process only once the system's pids have wrapped around meanwhile."""
    me, group, until = os.getpid(), os.getpgrp(), last_pid()
    given = range(since + 1, until + 1) if since <= until else None
    strays = {pid for pid, parent, pgid in _live(given) if pgid == group or parent == me} - spared
    for pid in strays:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return len(strays)


def live_members(pgid: int) -> set[int]:
    """The processes of a group, as /proc lists them now."""
    return {pid for pid, _, group in _live() if group == pgid}


def _live(pids: Iterable[int] | None = None) -> list[tuple[int, int, int]]:
    """Every process (of `pids`, if given) but the dead not yet waited for (zombies): its pid,
    its parent's, its group's."""
    found = []
    for pid in pids if pids is not None else (int(e) for e in os.listdir("/proc") if e.isdigit()):
        with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/stat", "rb") as file:
            # "pid (comm) state ppid pgrp ...": comm may hold any byte but the last ")"
            state, parent, group = file.read().rpartition(b")")[2].split()[:3]
            if state != b"Z":
                found.append((pid, int(parent), int(group)))
    return found


@dataclass(frozen=True, slots=True)
class Cut:
    """What goes of a log that grew too much in one attempt: the bytes in [start, end)."""

    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def cut_of(before: int, after: int, cap: int = OUTPUT_CAP) -> Cut | None:
    """A log that was `before` bytes long when the attempt began and is `after` now keeps
    the attempt's first and last cap/2 bytes; None if it wrote no more than `cap`."""
    if after - before <= cap:
        return None
    return Cut(before + cap // 2, after - cap // 2)


def log_sizes() -> dict[int, int]:
    """The sizes of the files a work-horse writes to (its stdout and stderr, when they are
    regular files; one entry for both when they are one file), by descriptor."""
    sizes: dict[int, int] = {}
    seen: set[tuple[int, int]] = set()
    for fd in (1, 2):
        with contextlib.suppress(OSError):
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                sizes[fd] = st.st_size
    return sizes


def cap_output(before: dict[int, int], cap: int = OUTPUT_CAP) -> None:
    """Each file in `before` (`log_sizes` as the attempt began) cut to the attempt's first
    and last cap/2 bytes, with a line saying how many went."""
    for fd, start in before.items():
        with contextlib.suppress(OSError):
            cut = cut_of(start, os.fstat(fd).st_size, cap)
            if cut is None:
                continue
            # The log is open for appending only: its tail is read through a descriptor of its own.
            reader = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY)
            try:
                tail = os.pread(reader, cap, cut.end)
            finally:
                os.close(reader)
            os.ftruncate(fd, cut.start)
            note = f"\n[testbed: {cut.size} bytes of this work-horse's output cut; {cap} kept per attempt]\n"
            os.write(fd, note.encode() + tail)
