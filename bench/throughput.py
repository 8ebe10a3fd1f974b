"""Throughput of `testbed load` without faults against raw RQ, in the same run.

    python bench/throughput.py [--ops 2000] [--workers 2 --workers 4] [--runs 3]
                               [--strategy provider-key] [--handler MODULE:FUNCTION]...

Baseline: the same number of plain `rq worker` processes on a private Redis,
draining no-op jobs, with the lab's worker class (RQ's forking Worker, its
one-second shutdown stall fixed: `workers/worker.py`), so that neither side
pays that stall. Then `testbed load` with no
kills: every job is a tool call that reads its intent, writes its markers and
sends its request to the provider. The ratio is ours / raw (target: 0.9), for
each number of workers (2 and 4 unless given), the median of --runs pairs;
each pair runs back to back and prints the machine's load average with it.
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
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


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
        # The lab's worker class unless the caller names one (job_profile.py times its own).
        path = os.pathsep.join([str(HERE), str(HERE.parent)])
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
            import floor_job  # only here: raw RQ's own enqueuer imports nothing of the lab's
        if not whole:
            started = time.perf_counter()
        for first in range(0, ops, 1000):
            # Results kept past the drain: the finished registry forgets a job whose result
            # expired, and a drain slower than the TTL (a busy machine) would never be counted done.
            count = min(1000, ops - first)
            if floor is None:
                batch = [Queue.prepare_data("noop_job.noop", result_ttl=3600) for _ in range(count)]
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


def cpu_used() -> float:
    """CPU seconds of this process (raw RQ's enqueuer) and of every finished child and
    its descendants (work-horses included: each worker waits for its own)."""
    mine, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return mine.ru_utime + mine.ru_stime + children.ru_utime + children.ru_stime


def load_average() -> str:
    return f"{os.getloadavg()[0]:.2f}"


def compile_project() -> None:
    """The project's packages (and this folder) compiled to bytecode before anything is
    timed, as installing the project's wheel leaves them, and as rq and redis-py come
    from theirs. An editable install compiles a module at its first import and caches
    it; where PYTHONDONTWRITEBYTECODE is set (it is on this project's VMs) nothing is
    cached, and each process of every run compiled the lab's modules again: about
    0.2 s of CPU per `testbed chaos` that an installed copy never pays."""
    import compileall
    import tomllib

    wheel = tomllib.loads((HERE.parent / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    for folder in [HERE, *(HERE.parent / name for name in wheel["packages"])]:
        if not compileall.compile_dir(folder, quiet=1):
            sys.exit(f"could not compile {folder}")


CHAOS_JOBS = 1280  # 12 cells x 100 ops, plus a retry for each of the 80 faulted ops
CHAOS_WORKERS = 4


def parse_sides(parser: argparse.ArgumentParser, ops: int, workers: int) -> argparse.Namespace:
    """The command line of a benchmark that runs each side of `programs` in turn (its own
    options added to `parser` before): raw RQ and `testbed load` on --ops jobs and --workers
    workers (`ops` and `workers` unless given), or with --chaos the default chaos run's. A
    bad combination is one line and exit 2."""
    parser.add_argument("--ops", type=int, help=f"{ops} (with --chaos: the run's {CHAOS_JOBS:,} jobs)")
    parser.add_argument("--workers", type=int, help=f"{workers} (with --chaos: the run's {CHAOS_WORKERS})")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--strategy", default="provider-key")
    parser.add_argument("--chaos", action="store_true", help="the default `testbed chaos` instead of `testbed load`")
    args = parser.parse_args()
    if args.chaos and (args.ops or args.workers):
        parser.error("--chaos runs the default chaos run: its jobs and workers are its own")
    if args.runs < 1 or (args.ops is not None and args.ops < 1) or (args.workers is not None and args.workers < 1):
        parser.error("--runs, --ops and --workers must be 1 or more")
    args.ops, args.workers = (CHAOS_JOBS, CHAOS_WORKERS) if args.chaos else (args.ops or ops, args.workers or workers)
    return args


def programs(
    worker_class: str, work: Path, ops: int, workers: int, strategy: str = "provider-key", chaos: bool = False
) -> tuple[dict[str, str], dict[str, list[str]]]:
    """The environment (this folder on the path, the workers of `worker_class`) and the two
    sides' programs: raw RQ draining `ops` no-op jobs, and `testbed load` with no kills (or
    the default `testbed chaos`) on as many workers."""
    path = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "RQ_WORKER_CLASS": worker_class}
    lab = ["load", "--kill-rate", "0", "--ops", str(ops), "--workers", str(workers), "-s", strategy]
    sides = {
        "raw RQ": [sys.executable, str(HERE / "raw_rq.py"), str(ops), str(workers)],
        "testbed": [sys.executable, "-m", "testbed", *(["chaos"] if chaos else lab), "--no-store"],
    }
    sides["testbed"] += ["--json", str(work / "run.json")]
    return env, sides


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--workers", type=int, action="append", help="repeatable; default: 2 and 4")
    parser.add_argument("--runs", type=int, default=1, help="pairs per worker count; the median ratio is printed")
    parser.add_argument("--strategy", default="provider-key")
    parser.add_argument("--handler", action="append", default=[], help="a user's job (MODULE:FUNCTION) to measure")
    args = parser.parse_args()
    compile_project()
    work = Path(tempfile.mkdtemp(prefix="testbed-bench-"))
    print(f"{args.ops} jobs per run, {os.cpu_count()} cpus; target: 0.9 of raw RQ")
    try:
        for workers in args.workers or [2, 4]:
            ratios, cpu_ratios = [], []
            for run in range(1, args.runs + 1):
                before, cpu = load_average(), cpu_used()
                raw = args.ops / raw_rq(args.ops, workers, work)
                raw_cpu, cpu = (cpu_used() - cpu) / args.ops, cpu_used()
                ours = testbed_load(args.ops, workers, ["-s", args.strategy], work)
                our_cpu = (cpu_used() - cpu) / args.ops
                ratios.append(ours / raw)
                cpu_ratios.append(raw_cpu / our_cpu)
                print(
                    f"{workers} workers, run {run}: raw RQ {raw:6.1f} jobs/s, testbed load ({args.strategy}) "
                    f"{ours:6.1f} ops/s, ratio {ours / raw:.2f}  (load average {before} -> {load_average()})"
                )
                # CPU per job, start-up included, every process of each side: what a busy machine shifts least.
                print(
                    f"  CPU per job: raw RQ {raw_cpu * 1000:.1f} ms, testbed {our_cpu * 1000:.1f} ms, "
                    f"ratio {raw_cpu / our_cpu:.2f}"
                )
                for handler in args.handler:
                    rate = testbed_load(args.ops, workers, ["--handler", handler], work)
                    print(f"  --handler {handler}: {rate:6.1f} ops/s, {rate / ours:.2f} of the built-in (target 0.9)")
            print(
                f"{workers} workers: ratio {statistics.median(ratios):.2f}, by CPU per job "
                f"{statistics.median(cpu_ratios):.2f} (medians of {len(ratios)})"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    main()
