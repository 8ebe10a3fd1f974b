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

Its wire and its loop are `labcore.zygote`'s: the supervisor asks for a worker,
the zygote forks it and reports its exit.

A process a job leaves behind when its work-horse ends, and its worker does not
stop (`workers.horses`: one that left the work-horse's process group), becomes
the zygote's (PR_SET_CHILD_SUBREAPER), not init's: the run finds it below the
zygote and stops it before the zygote goes (`testbed.infra.supervisor`). The
zygote reaps it as it reaps its workers, and reports its exit as theirs.
"""

from __future__ import annotations

import os

from labcore import zygote
from labcore.collector import uncollected
from labcore.prctl import adopt_orphans, die_with_the_run
from labcore.zygote import Fork


def main() -> None:
    die_with_the_run()
    adopt_orphans()
    with uncollected():  # every worker's and work-horse's, for their whole lives
        _preload()
    zygote.serve(_become_worker)


def _preload() -> None:
    """The lab's code, imported once here and shared by every worker and work-horse forked after."""
    import encodings.idna  # noqa: F401  (a TCP provider's first request would import it in every work-horse)

    from workers import engines

    engines.side().preload()


def _become_worker(request: Fork) -> None:
    from workers.instrument import WORKER_ENV

    os.environ[WORKER_ENV] = request.name
    from labcore.prctl import set_name
    from workers import engines

    # Its command line is the zygote's: `ps -o comm` and `top` show it as the worker it is.
    set_name(f"{engines.name()}-worker {request.name}")
    _run(request.argv)


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
