"""RQ's workers: `rq worker`, RQ's forking Worker as `workers.worker` amends it."""

from __future__ import annotations

import os


def preload() -> None:
    import rq.cli  # noqa: F401

    import workers.handler  # noqa: F401

    # A worker class set in the environment (a benchmark's) takes precedence.
    from workers.worker import CLASS_PATH

    os.environ.setdefault("RQ_WORKER_CLASS", CLASS_PATH)


def serve(argv: list[str]) -> None:
    from rq.cli.cli import main as rq_main

    rq_main(args=["worker", *argv], prog_name="rq")
