"""One process that imports the workers' code once and forks every RQ worker of a run from it.

    python -m workers.zygote   (started by the run's supervisor; its environment is its workers':
                                RQ_REDIS_URL, rq's own variable for `--url`, holds the password,
                                and TESTBED_PROVIDER_TOKEN the provider's token, never a command line)

A worker started as a fresh interpreter spends a good deal of CPU on its
imports (rq, redis-py, the handler) before it takes its first job: at a run's
start, several of them at once hold back the first cell, and a worker the lab
killed would come back only as fast as a new interpreter starts.
Forked from here, a worker starts with all of it imported, and so does every
work-horse it forks for a job, then runs RQ's own command line, `rq worker`
(RQ's forking Worker, as `workers.worker` amends it).

The wire, in this module only: one JSON line per message. The supervisor writes
`Fork` on the zygote's stdin; the zygote answers `Forked` on its stdout, in the
order asked, and reports `Exited` (the code as `Popen.returncode` has it: minus
the signal) when it reaps a worker. It exits when its stdin closes; a worker
still running then dies with it (PR_SET_PDEATHSIG), as it dies with the run.

A process a job leaves behind when its work-horse ends, and its worker does not
stop (`workers.horses`: one that left the work-horse's process group), becomes
the zygote's (PR_SET_CHILD_SUBREAPER), not init's: the run finds it below the
zygote and stops it before the zygote goes (`testbed.infra.supervisor`). The
zygote reaps it as it reaps its workers, and reports its exit as theirs.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import traceback
from dataclasses import asdict, dataclass
from typing import NoReturn


@dataclass(frozen=True, slots=True)
class Fork:
    name: str  # the worker's, as RQ registers it
    argv: list[str]  # `rq worker` options and queues
    log: str  # the worker's stdout and stderr, appended


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


def main() -> None:
    # Imported here: the run imports this module for its wire format alone.
    from labcore.collector import uncollected
    from labcore.prctl import adopt_orphans, die_with_parent

    parent = os.environ.get("TESTBED_PARENT_PID")
    die_with_parent(int(parent) if parent else None)
    adopt_orphans()
    with uncollected():  # every worker's and work-horse's, for their whole lives
        _preload()
    # A worker's exit wakes the loop (signal.set_wakeup_fd): it is reported as it is reaped.
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
            os.write(1, encode(Forked(_fork(decode_fork(line), (wake_r, wake_w)))))


def _preload() -> None:
    """The lab's code, imported once here and shared by every worker and work-horse forked after."""
    import encodings.idna  # noqa: F401  (a TCP provider's first request would import it in every work-horse)

    from workers import engines

    engines.side().preload()


def _reap() -> None:
    """Every child that has exited, reported (its workers, and the orphans it adopted)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:  # none at all
            return
        if pid == 0:
            return
        os.write(1, encode(Exited(pid, os.waitstatus_to_exitcode(status))))


def _fork(request: Fork, wake: tuple[int, int]) -> int:
    zygote = os.getpid()
    pid = os.fork()
    if pid == 0:
        _become_worker(request, wake, zygote)
    return pid


def _become_worker(request: Fork, wake: tuple[int, int], zygote: int) -> NoReturn:
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in wake:
            os.close(fd)
        # Its own process group, as RQ puts each work-horse in one, but in the zygote's session
        # (which no terminal's Ctrl-C reaches), as raw RQ's workers share the session that
        # started them. A session of its own is a scheduling group of its own where the kernel
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
        from labcore.prctl import die_with_parent, set_name

        die_with_parent(zygote)
        from workers.instrument import WORKER_ENV

        os.environ[WORKER_ENV] = request.name
        from workers import engines

        # Its command line is the zygote's: `ps -o comm` and `top` show it as the worker it is.
        set_name(f"{engines.name()}-worker {request.name}")
        _run(request.argv)
        code = 0
    except SystemExit as exc:  # RQ's command line ends with sys.exit
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _run(argv: list[str]) -> None:
    """The engine's own worker, `rq worker` or `celery worker` with these options. Users' jobs'
    libraries are imported here, in each worker, not in the zygote: what a library sets
    up at import is each worker's own, as under `rq worker`."""
    from labcore.connections import waiting_url
    from labcore.credentials import RQ_URL_ENV
    from workers.specs import USER_JOBS_ENV

    # rq's command line talks to Redis before its worker sets a long socket timeout:
    # with redis-py's default (5 s), a paused Redis would kill the worker there.
    os.environ[RQ_URL_ENV] = waiting_url(os.environ[RQ_URL_ENV])

    jobs = os.environ.get(USER_JOBS_ENV)
    if jobs:  # users' jobs: their wrapper, the HTTP clients it instruments, the libraries they import
        from workers import userjob  # noqa: F401
        from workers.specs import preload

        preload(jobs)
    from workers import engines

    engines.side().serve(argv)


if __name__ == "__main__":
    main()
