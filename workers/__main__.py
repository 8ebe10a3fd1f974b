"""Start a real `rq worker` (RQ's forking Worker, as `workers.worker` amends it) with the job code preloaded.

    python -m workers <rq worker options and queues>

The Redis URL comes from RQ_REDIS_URL (rq's own variable for `--url`), not
from the command line: it holds the password. The provider's token comes from
TESTBED_PROVIDER_TOKEN (workers.client).

Importing the handler here, once, means every work-horse forked for a job
starts with it instead of importing it anew.
"""

from __future__ import annotations

import os
import sys

from labcore.procs import die_with_parent
from workers.target import USER_JOBS_ENV


def main() -> None:
    parent = os.environ.get("TESTBED_PARENT_PID")
    die_with_parent(int(parent) if parent else None)
    import encodings.idna  # noqa: F401  (the first request would import it in every work-horse)
    from urllib.parse import unquote

    unquote("%2F")  # builds its decoding table once, here, not in every work-horse (labcore.endpoints)

    from rq.cli import main as rq_main

    import workers.handler  # noqa: F401  (preload for the work-horses)

    jobs = os.environ.get(USER_JOBS_ENV)
    if jobs:  # users' jobs: their wrapper, the HTTP clients it instruments, the libraries they import
        from workers import userjob  # noqa: F401
        from workers.target import preload

        preload(jobs)

    # A worker class set in the environment (a benchmark's) takes precedence.
    from workers.worker import CLASS_PATH

    os.environ.setdefault("RQ_WORKER_CLASS", CLASS_PATH)
    rq_main(args=["worker", *sys.argv[1:]], prog_name="rq")


if __name__ == "__main__":
    main()
