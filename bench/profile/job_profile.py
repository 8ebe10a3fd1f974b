"""Where a job's CPU goes, raw RQ against `testbed load`, measured rather than estimated.

    python -m bench.profile.job_profile [--ops 1000] [--workers 2] [--runs 2] [--strategy provider-key] [--floor]
    python -m bench.profile.job_profile --chaos [--runs 2] [--floor]

Each side runs as its own program, its workers with `timed_worker.TimedWorker`
(the lab's worker class, RQ's forking Worker, recording each work-horse): raw
RQ (`raw_rq.py`, no-op jobs) and `testbed load --kill-rate 0`, taking turns.
CPU by role comes from polling every process of the program (psutil; a
worker's work-horses are in its children's times) and, for the program
itself, from what is left of the whole tree's CPU as `wait4` reports it;
inside the work-horse from `timed_worker`, which also times the handler's
parts (its two round trips to Redis, its request to the provider, the flow
between them) with their page faults. Figures are ms of CPU per job,
medians of --runs. With --chaos, the lab's side is the default 12-cell
`testbed chaos` instead, against raw RQ draining as many jobs on as many
workers (1,280 on 4, as `article_speed.py` times them): the same table for
the run that benchmark times, its kills and RQ's failure handling included
(a killed work-horse records nothing inside, so the work-horse's parts are
means over those that finished). With --floor, a third program between the
two: raw RQ running `floor_job.attempt` jobs, the I/O every attempt of the
lab must do and nothing else, against a bare server (its CPU in the
provider's row): what the lab could not cost less than, whatever it did.
Last, what a copy-on-write page fault costs on this machine (forked children
writing to their parent's pages), and so what the work-horses' faults come
to.
"""

from __future__ import annotations

import argparse
import contextlib
import mmap
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import psutil

from bench.support.bare_server import floor_server
from bench.support.sides import ROOT, compile_project, parse_sides, programs
from bench.support.timed_worker import SEGMENTS, minor_faults

ROWS = [
    ("workers", "worker process: dequeue, fork, wait, RQ's bookkeeping"),
    ("horse", "work-horse, fork to exit (wait4)"),
    ("fork", "  fork's return, until RQ's main_work_horse"),
    ("rq", "  RQ's main_work_horse"),
    ("handler", "    of which the lab's handler"),
    ("first", "      first round trip: count the attempt, read intent, plan, marker"),
    ("request", "      the request to the provider, its connection included"),
    ("last", "      last round trip: the last marker and the outcome"),
    ("flow", "      the flow between them"),
    ("exit", "  exit and teardown"),
    ("faults", "  minor page faults per work-horse (count)"),
    ("handler faults", "    of which in the lab's handler (count)"),
    ("zygote", "the lab's zygote: the workers' imports, once, and their forks"),
    ("provider", "provider"),
    ("redis", "Redis"),
    ("program", "the program: enqueuer (raw) / testbed process"),
    ("total", "total"),
]
LAB_ONLY = {*SEGMENTS, "flow", "handler faults", "zygote"}


def _role(process: psutil.Process, workers: set[int], program: int) -> str:
    if process.ppid() in workers:
        return "horse"
    line = " ".join(process.cmdline())
    if "-m workers.zygote" in line:  # the lab's workers are its forks, with its command line
        return "zygote" if process.ppid() == program else "workers"
    if "redis-server" in line:
        return "redis"
    if "-m provider" in line:
        return "provider"
    if "rq.cli worker" in line:
        return "workers"
    return "other"


def run(argv: list[str], env: dict[str, str], ops: int, horses: Path) -> dict[str, float]:
    """ms of CPU per job by role, and inside the work-horse."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    top = psutil.Process(proc.pid)
    last: dict[int, tuple[str, float]] = {}
    workers: set[int] = set()
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)  # the whole tree's CPU, once it is over
        if pid:
            break
        try:
            family = top.children(recursive=True)
        except psutil.NoSuchProcess:  # exited, not yet reaped
            family = []
        for process in family:
            try:
                # Known once placed: a child seen between its fork and its exec has its parent's command line.
                known = last.get(process.pid, ("other",))[0]
                role = known if known != "other" else _role(process, workers, proc.pid)
                times = process.cpu_times()
            except psutil.Error:
                continue
            if role == "horse":
                continue
            if role == "workers":
                workers.add(process.pid)
            kids = times.children_user + times.children_system if role == "workers" else 0.0
            last[process.pid] = (role, times.user + times.system + kids)
        time.sleep(0.05)
    proc.returncode = status
    if status != 0:
        raise SystemExit(f"{argv} failed")
    per_job: defaultdict[str, float] = defaultdict(float)
    for role, seconds in last.values():
        per_job[role] += seconds * 1000 / ops
    per_job["total"] = (usage.ru_utime + usage.ru_stime) * 1000 / ops
    parts = ("workers", "zygote", "provider", "redis", "other")
    per_job["program"] = per_job["total"] - sum(per_job[r] for r in parts)
    inside = [tuple(map(float, f.read_text().split())) for f in horses.glob("*.horse")]
    whole = [float(f.read_text()) * 1000 for f in horses.glob("*.whole")]
    per_job["horse"] = statistics.mean(whole)
    per_job["fork"] = statistics.mean(h[0] for h in inside) * 1000
    per_job["rq"] = statistics.mean(h[1] for h in inside) * 1000
    per_job["exit"] = per_job["horse"] - per_job["fork"] - per_job["rq"]
    per_job["faults"] = statistics.mean(h[2] for h in inside)
    # Then each segment's CPU and page faults (timed_worker.SEGMENTS; zeros on raw RQ's side).
    for n, name in enumerate(SEGMENTS):
        per_job[name] = statistics.mean(h[3 + 2 * n] for h in inside) * 1000
        per_job[f"{name} faults"] = statistics.mean(h[4 + 2 * n] for h in inside)
    per_job["flow"] = per_job["handler"] - sum(per_job[name] for name in SEGMENTS if name != "handler")
    per_job["workers"] -= per_job["horse"]  # the workers' figure held their horses
    return per_job


def cow_fault_ms(pages: int = 2000, rounds: int = 5) -> float:
    """The CPU a copy-on-write page fault costs here, in ms: forked children write once
    to each of `pages` pages of their parent's memory, against children that only
    read them (the same loop); the kernel's time included, as in a work-horse's."""
    memory = bytearray(mmap.PAGESIZE * pages)
    memory[:: mmap.PAGESIZE] = b"\1" * pages  # the parent's own pages, then shared with each child
    spent: dict[bool, list[tuple[float, int]]] = {False: [], True: []}
    for _ in range(rounds):
        for write in (False, True):
            read_end, write_end = os.pipe()
            pid = os.fork()
            if pid == 0:
                faults, cpu = minor_faults(), time.process_time()
                for offset in range(0, len(memory), mmap.PAGESIZE):
                    if write:
                        memory[offset] = 2
                    else:
                        memory[offset]  # read only: the loop's own cost
                os.write(write_end, f"{time.process_time() - cpu} {minor_faults() - faults}".encode())
                os._exit(0)
            os.close(write_end)
            said_cpu, said_faults = os.read(read_end, 100).split()
            os.close(read_end)
            os.waitpid(pid, 0)
            spent[write].append((float(said_cpu), int(said_faults)))
    (read_cpu, read_faults), (write_cpu, write_faults) = (
        (statistics.median(c for c, _ in spent[w]), statistics.median(f for _, f in spent[w])) for w in (False, True)
    )
    return (write_cpu - read_cpu) * 1000 / (write_faults - read_faults)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--floor", action="store_true", help="raw RQ running floor_job's jobs too, between the two")
    args = parse_sides(parser, ops=1000, workers=2)
    compile_project()
    work = Path(tempfile.mkdtemp(prefix="testbed-bench-"))
    worker_class = "bench.support.timed_worker.TimedWorker"
    env, sides = programs(worker_class, work, args.ops, args.workers, args.strategy, args.chaos)
    what = "testbed chaos" if args.chaos else f"testbed load -s {args.strategy}"
    results: dict[str, list[dict[str, float]]] = defaultdict(list)
    try:
        with contextlib.ExitStack() as stack:
            if args.floor:
                server, url = stack.enter_context(floor_server(work))
                sides = {"raw RQ": sides["raw RQ"], "floor": [*sides["raw RQ"], url], "testbed": sides["testbed"]}
            for n in range(args.runs):
                for side, argv in sides.items():
                    horses = work / f"{side}-{n}"
                    horses.mkdir()
                    side_env = env | {"JOB_PROFILE_DIR": str(horses)}
                    if side == "floor":
                        side_env["RQ_WORKER_CLASS"] = "bench.support.floor_job.FloorWorker"
                        before = sum(server.cpu_times()[:2])
                    per_job = run(argv, side_env, args.ops, horses)
                    if side == "floor":  # the bare server stands in for the provider, outside the program
                        per_job["provider"] = (sum(server.cpu_times()[:2]) - before) * 1000 / args.ops
                        per_job["total"] += per_job["provider"]
                    results[side].append(per_job)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{what}: {args.ops} jobs, {args.workers} workers, {os.cpu_count()} cpus", end="; ")
    print(f"ms of CPU per job, medians of {args.runs}")
    width = max(len(label) for _, label in ROWS)
    print(f"{'':{width}}" + "".join(f"  {side:>8}" for side in sides))
    for key, label in ROWS:
        cells = ""
        for side in sides:
            value = statistics.median(r[key] for r in results[side])
            if key in LAB_ONLY and side != "testbed":
                cells += f"  {'-':>8}"
            else:
                cells += f"  {value:8.0f}" if "faults" in key else f"  {value:8.2f}"
        print(f"{label:{width}}{cells}")
    totals = {side: statistics.median(r["total"] for r in results[side]) for side in sides}
    print(f"CPU ratio raw RQ / testbed: {totals['raw RQ'] / totals['testbed']:.2f}")
    if args.floor:
        floor, lab = totals["floor"] - totals["raw RQ"], totals["testbed"] - totals["raw RQ"]
        print(
            f"on top of raw RQ: the floor {floor:.2f} ms a job ({totals['floor'] / totals['raw RQ']:.3f}x), "
            f"the lab {lab:.2f} ({totals['testbed'] / totals['raw RQ']:.3f}x): "
            f"the floor is {floor / lab:.0%} of the lab's"
        )
    fault = cow_fault_ms()
    raw_faults, our_faults, handler_faults = (
        statistics.median(r[key] for r in results[side])
        for key, side in (("faults", "raw RQ"), ("faults", "testbed"), ("handler faults", "testbed"))
    )
    print(
        f"a copy-on-write page fault costs {fault * 1000:.1f} µs of CPU here: the work-horse's faults come to "
        f"{raw_faults * fault:.2f} ms (raw RQ) and {our_faults * fault:.2f} ms (testbed), "
        f"the lab's handler's to {handler_faults * fault:.2f} ms"
    )


if __name__ == "__main__":
    main()
