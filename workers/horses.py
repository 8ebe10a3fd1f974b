"""What a work-horse may leave behind once it has ended, and what the worker does about it.

RQ puts each work-horse in a process group of its own (`os.setpgrp`, the group's
id the horse's pid). Whatever a job starts and does not wait for (a process
forked per call, a subprocess) stays in that group and outlives the horse: the
worker stops the group's members as soon as it has reaped the horse, before it
takes another job, and says how many there were (`stop_group`). A process that
leaves the group (a daemon's `setsid`) is found at the run's end instead, in the
session of the run's workers (`testbed.infra.supervisor`).

A work-horse writes to its worker's log; what it writes beyond OUTPUT_CAP bytes
in one attempt is cut from the middle once it has ended (`cap_output`): its
first and last lines stay, with a line saying how much went between them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
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
    members = _live_members(pgid)
    if members:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    return members


def _live_members(pgid: int) -> int:
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError), open(f"/proc/{entry}/stat", "rb") as file:
                # "pid (comm) state ppid pgrp ...": comm may hold any byte but the last ")"
                state, _, group = file.read().rpartition(b")")[2].split()[:3]
                count += state != b"Z" and int(group) == pgid
    return count


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
