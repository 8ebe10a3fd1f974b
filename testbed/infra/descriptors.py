"""The open files a run's processes need, checked before anything starts.

Too few descriptors do not fail a run at its start: they fail it part way, as
connections the provider turns away and broken pipes in the jobs, which would be
scored as if the jobs had lost work. So the limit is checked first, and the soft
limit raised to the hard one if it is too low (every process of the run inherits
it); only a hard limit too low refuses the run.
"""

from __future__ import annotations

import resource

from provider.limits import FILES_RESERVE
from testbed.errors import SetupError

# What redis-server keeps for itself of its limit (its maxclients is the rest).
_REDIS_RESERVE = 32


def needed(workers: int) -> int:
    """The most descriptors one process of a run with `workers` workers holds, with room to spare.
    Measured with `prlimit --nofile=N`: 4 workers ran at 72 and failed at 64, 12 ran at 90
    and failed at 76; the provider runs out first, then Redis (3 fds a worker at 8 workers)."""
    # Its own files, then per worker: the worker's kept connection and its work-horse's (a
    # user's job's, over TCP); the controller's and the lab's own.
    provider = FILES_RESERVE + 2 * workers + 8
    # Per worker: the worker's, its work-horse's and its heartbeat's clients; the lab's and the provider's own.
    redis = _REDIS_RESERVE + 3 * workers + 16
    return max(provider, redis)


def ensure(workers: int) -> None:
    """The soft limit on open files raised to what the run needs (to the hard limit), or a
    SetupError saying how many it needs, where the hard limit is below that."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = needed(workers)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    if hard == resource.RLIM_INFINITY or hard >= need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need if hard == resource.RLIM_INFINITY else hard, hard))
        return
    raise SetupError(
        f"a run with {workers} worker(s) needs {need} open files per process; the limit is {soft} (hard {hard}):"
        f" raise it (ulimit -n {need}) or run fewer --workers"
    )
