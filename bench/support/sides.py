"""What the benchmarks and profilers share: where things are, the project compiled
before anything is timed, the machine's load, and the two sides they compare (raw RQ
and the lab) as programs.

Every script runs from the project's root as a module of the `bench` package
(`python -m bench.throughput`) and imports these helpers by their package names, as
the workers it starts import the worker classes and jobs here
(`bench.support.timed_worker.TimedWorker`; raw RQ's no-op job alone by its plain
name, `raw_rq.NOOP`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]
ROOT = BENCH.parent

CHAOS_JOBS = 1280  # 12 cells x 100 ops, plus a retry for each of the 80 faulted ops
CHAOS_WORKERS = 4


def cpu_used() -> float:
    """CPU seconds of this process (raw RQ's enqueuer) and of every finished child and
    its descendants (work-horses included: each worker waits for its own)."""
    mine, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return mine.ru_utime + mine.ru_stime + children.ru_utime + children.ru_stime


def load_average() -> str:
    return f"{os.getloadavg()[0]:.2f}"


def compile_project() -> None:
    """The project's packages (and bench/) compiled to bytecode before anything is
    timed, as installing the project's wheel leaves them, and as rq and redis-py come
    from theirs. An editable install compiles a module at its first import and caches
    it; where PYTHONDONTWRITEBYTECODE is set nothing is cached, and each process of
    every run would compile the lab's modules again, which an installed copy never does."""
    import compileall
    import tomllib

    wheel = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    for folder in [BENCH, *(ROOT / name for name in wheel["packages"])]:
        if not compileall.compile_dir(folder, quiet=1):
            sys.exit(f"could not compile {folder}")


def parse_sides(parser: argparse.ArgumentParser, ops: int, workers: int) -> argparse.Namespace:
    """The command line of a profiler that runs each side of `programs` in turn (its own
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
    """The environment (the project's root on the path, for the workers of `worker_class`, a
    module of `bench`) and the two sides' programs, run from the root: raw RQ draining `ops`
    no-op jobs, and `testbed load` with no kills (or the default `testbed chaos`) on as many workers."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "RQ_WORKER_CLASS": worker_class}
    lab = ["load", "--kill-rate", "0", "--ops", str(ops), "--workers", str(workers), "-s", strategy]
    sides = {
        "raw RQ": [sys.executable, "-m", "bench.support.raw_rq", str(ops), str(workers)],
        "testbed": [sys.executable, "-m", "testbed", *(["chaos"] if chaos else lab), "--no-store"],
    }
    sides["testbed"] += ["--json", str(work / "run.json")]
    return env, sides


@dataclass(frozen=True, slots=True)
class Counts:
    """What a lab's run did, from its results: a raw baseline does as much."""

    cells: int
    attempts: int  # every op's attempts: the intended ops and their replays
    kills: int
    workers: int


def counted(results: Path) -> Counts:
    data = json.loads(results.read_text())
    if data["verdict"] != "pass":
        raise SystemExit(f"the lab's run did not pass ({results}): its counts are not the model's")
    rows = data["rows"]
    attempts = sum(r["intended"] + r["replays"] for r in rows)
    return Counts(len(rows), attempts, sum(r["kills"] for r in rows), data["options"]["workers"])
