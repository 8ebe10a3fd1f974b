"""Throughput of `testbed load` without faults against raw RQ, in the same run.

    python bench/throughput.py [--ops 2000] [--workers 4] [--strategy provider-key] [--handler MODULE:FUNCTION]...

Baseline: the same number of plain `rq worker` processes (the default forking
Worker) on a private Redis, draining no-op jobs. Then `testbed load` with no
kills: every job is a tool call that reads its intent, writes its markers and
sends its request to the provider. The ratio is ours / raw (target: 0.8).
With --handler (repeatable), users' jobs run the same load on the same number
of workers after the built-in strategy, each with its ratio to it (target:
0.9): `wire_job:send` (this folder) sends what the built-in sends, so its
ratio is the cost of the user-job path itself; `examples.keyed:send` adds its
own client (requests) and its own database (SQLite).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def raw_rq(ops: int, workers: int, work: Path) -> float:
    """Jobs per second of plain RQ workers draining no-op jobs (workers already up)."""
    from redis import Redis

    from labcore.procs import stop_all
    from testbed.infra.redis_server import PrivateRedis

    server = PrivateRedis(work)
    url = server.start()
    procs = []
    try:
        # The URL holds the private Redis's password: through the environment, as the lab does.
        env = {**os.environ, "PYTHONPATH": str(HERE), "RQ_KEY_PREFIX": "rq", "RQ_REDIS_URL": url}
        argv = [sys.executable, "-m", "rq.cli", "worker", "--logging_level", "WARNING", "raw"]
        procs = [subprocess.Popen([*argv, "--name", f"raw{i}"], env=env) for i in range(workers)]
        from rq import Queue, Worker

        redis = Redis.from_url(url)
        while Worker.count(connection=redis) < workers:
            time.sleep(0.05)
        queue = Queue("raw", connection=redis)
        started = time.perf_counter()
        for first in range(0, ops, 1000):
            batch = [Queue.prepare_data("noop_job.noop", result_ttl=60) for _ in range(min(1000, ops - first))]
            queue.enqueue_many(batch)
        while queue.finished_job_registry.count < ops:
            time.sleep(0.01)
        return ops / (time.perf_counter() - started)
    finally:
        stop_all(procs)
        server.stop()


def testbed_load(ops: int, workers: int, selection: list[str], work: Path) -> float:
    out = work / "load.json"
    argv = [sys.executable, "-m", "testbed", "load", "--kill-rate", "0", "--ops", str(ops), "--workers", str(workers)]
    # The examples keep their own state: in the bench's temp dir.
    env = {**os.environ, "EXAMPLES_DB": str(work / "examples.sqlite3")}
    argv += [*selection, "--path", str(HERE), "--json", str(out), "--store", str(work / "runs")]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env, cwd=HERE.parent)
    row = json.loads(out.read_text())["rows"][0]
    assert row["verdict"] == "pass", row["differences"]
    return ops / row["wallSeconds"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--strategy", default="provider-key")
    parser.add_argument("--handler", action="append", default=[], help="a user's job (MODULE:FUNCTION) to measure")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="testbed-bench-"))
    try:
        raw = raw_rq(args.ops, args.workers, work)
        ours = testbed_load(args.ops, args.workers, ["-s", args.strategy], work)
        mine = {h: testbed_load(args.ops, args.workers, ["--handler", h], work) for h in args.handler}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{args.ops} jobs, {args.workers} workers, {os.cpu_count()} cpus")
    print(f"raw RQ, no-op jobs:            {raw:6.1f} jobs/s")
    print(f"testbed load ({args.strategy}): {ours:6.1f} ops/s")
    print(f"ratio: {ours / raw:.2f} (target 0.8)")
    for handler, rate in mine.items():
        print(f"testbed load --handler {handler}: {rate:6.1f} ops/s, {rate / ours:.2f} of the built-in (target 0.9)")


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    main()
