"""Raw Celery, the baseline `celery_speed.py` compares `testbed chaos --engine celery` with:
a private Redis (broker and result backend) and plain `celery worker` processes draining
no-op tasks (`noop_task.py`), then everything stopped.

    python -m bench.support.raw_celery TASKS WORKERS [KILLS]    # from the project's root

The workers take the lab's command line (prefork, one pool child each, no gossip, mingle
or heartbeats: `testbed/infra/supervisor.py`), each in a fresh interpreter. With KILLS,
that many of the TASKS, spread evenly, SIGKILL their own pool child on their first
delivery and come back (`noop_task.die_once`): TASKS + KILLS attempts, and Celery's
recovery from each kill paid as the lab's run pays it.

`celery_speed.py` times this process as it times `testbed chaos`, from the
interpreter's start to its exit: starting Python, the imports, the stack, the
tasks until the result backend has every one's result (Celery's own
`ResultSet.join_native`, which hears them on the backend's channels), and the
teardown. Raw Celery's own client imports nothing of the lab's but the private
Redis and the process stopper.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APP = "bench.support.noop_task"  # by its package's name: the workers have the project's root on their path

# The lab's workers' own options (`Supervisor._celery_argv`), but for the queue and the name.
WORKER_OPTIONS = ["--pool", "prefork", "--concurrency", "1", "--without-gossip", "--without-mingle"]
WORKER_OPTIONS += ["--without-heartbeat", "--loglevel", "WARNING"]


def spread(tasks: int, kills: int) -> set[int]:
    """Which of the tasks kill their pool child: every (tasks / kills)-th, as the lab faults every N-th op."""
    return {i * tasks // kills for i in range(kills)} if kills else set()


def raw_celery(tasks: int, workers: int, kills: int, work: Path) -> None:
    from labcore.procs import stop_all
    from testbed.infra.redis_server import PrivateRedis

    run_dir = Path(tempfile.mkdtemp(dir=work, prefix="raw-"))
    markers = run_dir / "killed"
    markers.mkdir()
    server = PrivateRedis(run_dir)
    url = server.start()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        # A unix socket is `redis+socket://` to Celery; the URL holds the private Redis's
        # password: through the environment, as the lab passes it.
        celery_url = "redis+socket" + url.removeprefix("unix") if url.startswith("unix:") else url
        os.environ["RAW_CELERY_URL"] = celery_url
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "PYTHONPATH": path}
        argv = [sys.executable, "-m", "celery", "-A", APP, "worker", "--queues", "raw", *WORKER_OPTIONS]
        for i in range(workers):
            # Each worker's banner and its pool's reports of killed children go to its own log, as the lab's do.
            with open(run_dir / f"raw{i}.log", "wb") as log:
                command = [*argv, "--hostname", f"raw{i}@bench"]
                procs.append(subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT))
        from celery.result import ResultSet

        from bench.support.noop_task import app

        killers = spread(tasks, kills)
        sent = []
        with app.producer_or_acquire() as producer:
            for i in range(tasks):
                if i in killers:
                    sent.append(app.send_task("die_once", args=[str(markers / str(i))], producer=producer))
                else:
                    sent.append(app.send_task("noop", producer=producer))
        try:
            ResultSet(sent).join_native(propagate=True)
        except Exception as error:  # a task that failed would never have its result
            raise SystemExit(f"raw Celery: a task failed ({error!r})") from None
        if kills and len(list(markers.iterdir())) != kills:
            raise SystemExit(f"raw Celery: {len(list(markers.iterdir()))} of {kills} tasks killed their pool child")
    finally:
        stop_all(procs)
        server.stop()


def main() -> None:
    tasks, workers = int(sys.argv[1]), int(sys.argv[2])
    kills = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    work = Path(tempfile.mkdtemp(prefix="testbed-bench-"))
    try:
        raw_celery(tasks, workers, kills, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
