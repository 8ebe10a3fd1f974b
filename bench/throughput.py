"""Throughput of `testbed load` without faults against raw RQ, in the same run.

    python -m bench.throughput [--ops 2000] [--workers 2 --workers 4] [--runs 3]
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
0.9): `bench.support.wire_job:send` sends what the built-in sends, so its
ratio is the cost of the user-job path itself; `examples.keyed:send` adds its
own client (requests) and its own database (SQLite). A handler is imported
from the project's root (`--path`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.support.raw_rq import raw_rq
from bench.support.sides import ROOT, compile_project, cpu_used, load_average


def testbed_load(ops: int, workers: int, selection: list[str], work: Path) -> float:
    out = work / "load.json"
    argv = [sys.executable, "-m", "testbed", "load", "--kill-rate", "0", "--ops", str(ops), "--workers", str(workers)]
    # The examples keep their own state: in the bench's temp dir.
    env = {**os.environ, "EXAMPLES_DB": str(work / "examples.sqlite3")}
    # The handlers by their packages' names, from the project's root.
    argv += [*selection, "--path", str(ROOT), "--json", str(out), "--store", str(work / "runs")]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env, cwd=ROOT)
    row = json.loads(out.read_text())["rows"][0]
    assert row["verdict"] == "pass", row["differences"]
    return ops / float(row["wallSeconds"])


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
    main()
