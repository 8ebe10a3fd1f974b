"""Raw RQ, the baseline every benchmark compares the lab with: a private Redis and plain
`rq worker` processes (the lab's worker class) draining no-op jobs, then everything stopped.

    python -m bench.support.raw_rq OPS WORKERS [FLOOR_URL]    # from the project's root

With FLOOR_URL (a bare server's), the jobs are `floor_job.attempt`'s.

`bench/article_speed.py` times this process as it times `testbed chaos`, from
the interpreter's start to its exit, so both sides pay for starting Python,
their imports, their stack and its teardown. `bench/throughput.py` calls
`raw_rq` to time the drain alone. Stdlib at the top: raw RQ's own enqueuer
imports nothing of the lab's but the private Redis and the worker class.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
ROOT = SUPPORT.parent.parent
# Raw RQ's job by its plain name, from this folder: a work-horse imports its job's module for
# every job, and `bench.support.noop_job` would bring `bench` and `bench.support` with it each
# time (a quarter of a millisecond, 2% of a raw job's CPU), which RQ alone does not pay.
NOOP = "noop_job.noop"


def raw_rq(ops: int, workers: int, work: Path, *, whole: bool = False, floor: str | None = None) -> float:
    """Seconds plain RQ workers take to drain `ops` no-op jobs: from the first
    enqueue with the workers already up, or (`whole`) from starting Redis and
    the workers until they and Redis are stopped again, as `testbed chaos` is
    timed (its process starts and stops its whole stack). With `floor` (a bare
    server's URL), `floor_job.attempt` jobs instead, each op's intent stored
    before its job is enqueued."""
    from redis import Redis

    from labcore.procs import stop_all
    from testbed.infra.redis_server import PrivateRedis
    from workers.worker import CLASS_PATH

    started = time.perf_counter()
    run_dir = Path(tempfile.mkdtemp(dir=work, prefix="raw-"))
    server = PrivateRedis(run_dir)
    url = server.start()
    procs = []
    try:
        # The URL holds the private Redis's password: through the environment, as the lab does.
        # The lab's worker class unless the caller names one (job_profile.py times its own, by its package's
        # name), and the caller's path kept after this folder (NOOP) and the project's root (the floor's jobs).
        path = os.pathsep.join(filter(None, [str(SUPPORT), str(ROOT), os.environ.get("PYTHONPATH")]))
        env = {"RQ_WORKER_CLASS": CLASS_PATH, **os.environ, "PYTHONPATH": path}
        env |= {"RQ_KEY_PREFIX": "rq", "RQ_REDIS_URL": url}
        argv = [sys.executable, "-m", "rq.cli", "worker", "--logging_level", "WARNING", "raw"]
        procs = [subprocess.Popen([*argv, "--name", f"raw{i}"], env=env) for i in range(workers)]
        from rq import Queue, Worker

        redis = Redis.from_url(url)
        while Worker.count(connection=redis) < workers:
            time.sleep(0.05)
        queue = Queue("raw", connection=redis)
        if floor is not None:
            from bench.support import floor_job  # only here: raw RQ's own enqueuer imports nothing of the lab's
        if not whole:
            started = time.perf_counter()
        for first in range(0, ops, 1000):
            # Results kept past the drain: the finished registry forgets a job whose result
            # expired, and a drain slower than the TTL (a busy machine) would never be counted done.
            count = min(1000, ops - first)
            if floor is None:
                batch = [Queue.prepare_data(NOOP, result_ttl=3600) for _ in range(count)]
            else:
                ids = floor_job.store(redis, first + 1, count)
                batch = [floor_job.prepared(floor, op) for op in ids]
            queue.enqueue_many(batch)
        polls = 0
        while queue.finished_job_registry.count < ops:
            # A job that failed for good would never be counted done. Looked for once a second, not at
            # every poll: this process's CPU is part of raw RQ's side, which the lab is measured against.
            polls += 1
            if polls % 100 == 0 and queue.failed_job_registry.get_job_count(cleanup=False):
                raise SystemExit(f"raw RQ: a job failed ({queue.failed_job_registry.get_job_ids(cleanup=False)[0]})")
            time.sleep(0.01)
        drained = time.perf_counter()
        if floor is not None:
            floor_job.check(redis, ops)
    finally:
        stop_all(procs)
        server.stop()
    return (time.perf_counter() if whole else drained) - started


def main() -> None:
    ops, workers = int(sys.argv[1]), int(sys.argv[2])
    floor = sys.argv[3] if len(sys.argv) > 3 else None
    work = Path(tempfile.mkdtemp(prefix="testbed-bench-"))
    try:
        raw_rq(ops, workers, work, whole=True, floor=floor)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
