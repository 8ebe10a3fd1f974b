"""A zygote: one process that has imported a part's code once and forks each process of that
part from itself, so that none of them pays an interpreter's start and imports. The run's
workers come from one (`workers.zygote`), and so does every incarnation of its provider
(`provider.zygote`), which a crash the lab makes replaces in the time a fork takes.

The wire, in this module only: one JSON line per message. The run writes `Fork`
on the zygote's stdin; the zygote answers `Forked` on its stdout, in the order
asked, and reports `Exited` (the code as `Popen.returncode` has it: minus the
signal) when it reaps a child. It exits when its stdin closes; a child still
running then dies with it (PR_SET_PDEATHSIG), as it dies with the run. The
run's side of the wire is `testbed.infra.forks`.

Each child is put in a process group of its own, its stdin on /dev/null, its
stdout and stderr appended to the log the request names, and is made to die with
the zygote; then it becomes what the zygote's `become` makes of the request, and
exits with the code that ends it.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import NoReturn


@dataclass(frozen=True, slots=True)
class Fork:
    name: str  # the child's, as the part names it (a worker's, as RQ registers it)
    argv: list[str]  # the part's own command-line options
    log: str  # the child's stdout and stderr, appended


@dataclass(frozen=True, slots=True)
class Forked:
    pid: int


@dataclass(frozen=True, slots=True)
class Exited:
    pid: int
    code: int


Reply = Forked | Exited


def encode(message: Fork | Reply) -> bytes:
    return (json.dumps({type(message).__name__: asdict(message)}) + "\n").encode()


def decode_fork(line: bytes) -> Fork:
    return Fork(**json.loads(line)["Fork"])


def decode_reply(line: bytes) -> Reply:
    ((kind, fields),) = json.loads(line).items()
    return Forked(**fields) if kind == "Forked" else Exited(**fields)


def serve(become: Callable[[Fork], None]) -> NoReturn:
    """Fork a child for each request on stdin until it closes, reporting each child's exit
    as it is reaped (the orphans it adopted too). The caller has imported what its children
    share, and set the zygote's own lifeline (`labcore.prctl`)."""
    # A child's exit wakes the loop (signal.set_wakeup_fd): it is reported as it is reaped.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    pending = b""
    while True:
        ready, _, _ = select.select([0, wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
        _reap()
        if 0 not in ready:
            continue
        data = os.read(0, 65536)
        if not data:  # the run closed our stdin: it is over (nothing to flush: no interpreter teardown)
            os._exit(0)
        pending += data
        *lines, pending = pending.split(b"\n")
        for line in lines:
            os.write(1, encode(Forked(_fork(decode_fork(line), (wake_r, wake_w), become))))


def _reap() -> None:
    """Every child that has exited, reported."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:  # none at all
            return
        if pid == 0:
            return
        os.write(1, encode(Exited(pid, os.waitstatus_to_exitcode(status))))


def _fork(request: Fork, wake: tuple[int, int], become: Callable[[Fork], None]) -> int:
    zygote = os.getpid()
    pid = os.fork()
    if pid == 0:
        _child(request, wake, zygote, become)
    return pid


def _child(request: Fork, wake: tuple[int, int], zygote: int, become: Callable[[Fork], None]) -> NoReturn:
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in wake:
            os.close(fd)
        # Its own process group, but in the zygote's session (which no terminal's Ctrl-C
        # reaches). A session of its own is a scheduling group of its own where the kernel
        # groups sessions (autogroup, on by default in most distributions): with each worker
        # and its work-horse a group, the scheduler shares the cores between the groups and
        # leaves one idle for part of a run, where workers in one session keep both busy.
        os.setpgid(0, 0)
        log = os.open(request.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(null)
        os.close(log)
        from labcore.prctl import die_with_parent

        die_with_parent(zygote)
        become(request)
        code = 0
    except SystemExit as exc:  # a command line ends with sys.exit
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
