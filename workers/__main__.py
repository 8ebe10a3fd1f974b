"""Start a real `rq worker` (RQ's forking Worker, as `workers.worker` amends it) with the job code preloaded.

    python -m workers <rq worker options and queues>

The Redis URL comes from RQ_REDIS_URL (rq's own variable for `--url`), not
from the command line: it holds the password. The provider's token comes from
TESTBED_PROVIDER_TOKEN (workers.client).

Importing the handler here, once, means every work-horse forked for a job
starts with it instead of importing it anew. A run forks its workers from
`workers.zygote`, which imports the same (`preload`) once for all of them and
runs the same (`run`) in each.
"""

from __future__ import annotations

import os
import sys

from labcore.procs import die_with_parent
from workers.target import USER_JOBS_ENV


def preload() -> None:
    """The lab's code a worker imports before its first job, so that each work-horse
    starts with it (the zygote, workers.zygote, imports it once, before it forks the workers)."""
    import encodings.idna  # noqa: F401  (the first request would import it in every work-horse)
    from urllib.parse import unquote

    unquote("%2F")  # builds its decoding table once, here, not in every work-horse (labcore.endpoints)

    import rq.cli  # noqa: F401

    import workers.handler  # noqa: F401  (preload for the work-horses)

    # A worker class set in the environment (a benchmark's) takes precedence.
    from workers.worker import CLASS_PATH

    os.environ.setdefault("RQ_WORKER_CLASS", CLASS_PATH)


def run(argv: list[str]) -> None:
    """RQ's own command line: `rq worker` with these options and queues. Users' jobs'
    libraries are imported here, in each worker (even one forked by the zygote): what a
    library sets up at import is each worker's own, as under `rq worker`."""
    from rq.cli import main as rq_main

    jobs = os.environ.get(USER_JOBS_ENV)
    if jobs:  # users' jobs: their wrapper, the HTTP clients it instruments, the libraries they import
        from workers import userjob  # noqa: F401
        from workers.target import preload as preload_jobs

        preload_jobs(jobs)

    rq_main(args=["worker", *argv], prog_name="rq")


def main() -> None:
    parent = os.environ.get("TESTBED_PARENT_PID")
    die_with_parent(int(parent) if parent else None)
    preload()
    run(sys.argv[1:])


if __name__ == "__main__":
    main()
