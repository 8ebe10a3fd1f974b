"""Where the machine's CPU goes, by process role, raw RQ against the lab: sampled by the kernel (perf).

    python -m bench.profile.cpu_by_role [--chaos | --ops 2000 --workers 4] [--runs 2] [--symbols 25]

Each side runs as its own program, as the other benchmarks run them (raw RQ
draining no-op jobs, `bench/support/raw_rq.py`; `testbed load --kill-rate 0`, or with
--chaos the default `testbed chaos` against raw RQ draining its 1,280 jobs
on 4 workers), under `perf record -a -e cpu-clock`: every CPU is sampled a
thousand times a second whatever it runs, its idle included, and so are
work-horses that live a few milliseconds, which a poll of the process table
misses. Each sample is charged to its process's role in the program's tree
(the program itself: raw RQ's enqueuer or the testbed process; Redis; the
provider; the lab's zygote; the workers; their work-horses; the cores'
idle), and to the kernel or user space. Printed: seconds of CPU by role,
each side (medians of --runs, the sides taking turns), and the lab's total
over raw RQ's, idle left out. With --symbols N, also where the work-horses'
CPU goes on each side: the N places where the lab's work-horses spent the
most more than raw RQ's, a kernel function by its name, user space by its
library (Python's own frames are not in perf's view of Python 3.11). Needs perf (Debian's linux-perf) and leave to
sample the whole machine (root, or kernel.perf_event_paranoid at 0 or less).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from bench.support.sides import ROOT, compile_project, parse_sides, programs

HZ = 1000
ROLES = ["horse", "worker", "zygote", "provider", "program", "redis", "other", "idle"]
_JOBS = 10  # a process that forked this many children is a worker (its work-horses)
FORK = re.compile(r"PERF_RECORD_FORK\((\d+):(\d+)\):\((\d+):\d+\)")
# perf script's line: the command, pid/tid, the address, the symbol (with -F sym), (the DSO).
_SAMPLE = re.compile(r"^\s*(.*?)\s+(\d+)/\d+\s+[0-9a-f]+\s+(.*?)\s*\((.*)\)\s*$")


@dataclass
class Sampled:
    """One program's run: seconds of CPU by role, all of it and the kernel's, and
    the work-horses' seconds by where they ran (with `symbols`; else empty)."""

    roles: dict[str, tuple[float, float]]
    horse_places: dict[str, float]


def recorded(
    argv: list[str], env: dict[str, str], out: Path, record: list[str], script: list[str]
) -> tuple[Tree, list[str]]:
    """The program run under `perf record -a` with `record`'s options; the process tree from
    the forks perf recorded, and the other lines `perf script` prints with `script`'s."""
    perf = ["perf", "record", "-q", "-a", *record, "-o", str(out), "--"]
    quiet = subprocess.DEVNULL
    proc = subprocess.Popen([*perf, *argv], env=env, cwd=ROOT, stdout=quiet, stderr=quiet)
    if proc.wait() != 0:
        raise SystemExit(f"{argv[:4]} failed under perf")
    printed = ["perf", "script", "-i", str(out), "--show-task-events", *script]
    tree, lines = Tree(proc.pid), []
    for line in subprocess.run(printed, capture_output=True, text=True, check=True).stdout.splitlines():
        if (fork := FORK.search(line)) is None:
            lines.append(line)
        elif fork.group(1) == fork.group(2):  # a process, not a thread
            tree.fork(int(fork.group(1)), int(fork.group(3)))
    return tree, lines


def sample(argv: list[str], env: dict[str, str], out: Path, symbols: bool = False) -> Sampled:
    """The program run under perf. The roles come from the process tree perf records (its
    forks) and the programs' names: nothing polls the process table meanwhile, which
    would itself take CPU from the run."""
    fields = "comm,pid,tid,ip,sym,dso" if symbols else "comm,pid,tid,ip,dso"
    tree, lines = recorded(argv, env, out, ["-e", "cpu-clock", "-F", str(HZ)], ["-F", fields])
    samples: Counter[tuple[int, bool, str]] = Counter()
    for line in lines:
        if (hit := _SAMPLE.match(line)) is not None:
            pid, dso = int(hit.group(2)), hit.group(4)
            tree.named(pid, hit.group(1))
            kernel = "kernel" in dso
            samples[pid, kernel, (f"kernel: {hit.group(3)}" if kernel else Path(dso).name) if symbols else ""] += 1
    spent: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    places: Counter[str] = Counter()
    for (pid, kernel, place), count in samples.items():
        role = tree.role(pid)
        spent[role][0] += count / HZ
        if kernel:
            spent[role][1] += count / HZ
        if symbols and role == "horse":
            places[place] += count
    roles = {role: (total, kernel) for role, (total, kernel) in spent.items()}
    return Sampled(roles, {place: count / HZ for place, count in places.items()})


class Tree:
    """The processes perf saw forked, and the names they ran under."""

    def __init__(self, perf: int) -> None:
        self._perf = perf
        self.parent: dict[int, int] = {}
        self.children: dict[int, set[int]] = defaultdict(set)
        self.names: dict[int, set[str]] = defaultdict(set)

    def fork(self, child: int, parent: int) -> None:
        self.parent[child] = parent
        self.children[parent].add(child)

    def named(self, pid: int, comm: str) -> None:
        self.names[pid].add(comm.strip())

    def role(self, pid: int) -> str:
        if pid == 0:
            return "idle"
        if any(name.startswith("redis-server") for name in self.names[pid]):
            return "redis"
        program = self._program()
        if pid == program:
            return "program"
        if self._forks_jobs(pid):
            return "worker"
        if self._forks_jobs(self.parent.get(pid)):
            return "horse"
        if self.parent.get(pid) == program:
            # The lab's zygote forks its workers; a Python child of the program that forks no
            # worker is its provider. (Raw RQ's workers are the program's own children.)
            return "zygote" if any(self._forks_jobs(c) for c in self.children[pid]) else "provider"
        ancestor = self.parent.get(pid)
        while ancestor is not None and ancestor != program:
            ancestor = self.parent.get(ancestor)
        return "other" if ancestor == program else "elsewhere"  # elsewhere: the machine's, not the program's

    def _program(self) -> int:
        """perf's child, which ran the program."""
        return min(self.children[self._perf])

    def _forks_jobs(self, pid: int | None) -> bool:
        """A worker: it forked a work-horse per job (raw RQ's workers, the lab's zygote's forks)."""
        return pid is not None and len(self.children[pid]) >= _JOBS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--symbols", type=int, default=0, metavar="N", help="the work-horses' N top places")
    args = parse_sides(parser, ops=2000, workers=4)
    if args.symbols < 0:
        parser.error("--symbols must be 0 or more")
    if shutil.which("perf") is None:
        print("perf is not installed (Debian's linux-perf)", file=sys.stderr)
        sys.exit(2)
    if os.geteuid() != 0 and int(Path("/proc/sys/kernel/perf_event_paranoid").read_text()) > 0:
        print("sampling the whole machine needs root or kernel.perf_event_paranoid at 0 or less", file=sys.stderr)
        sys.exit(2)
    from workers.worker import CLASS_PATH

    compile_project()
    work = Path(tempfile.mkdtemp(prefix="testbed-bench-"))
    results: dict[str, list[Sampled]] = defaultdict(list)
    try:
        env, sides = programs(CLASS_PATH, work, args.ops, args.workers, args.strategy, args.chaos)
        for n in range(args.runs):
            for side, argv in sides.items():
                results[side].append(sample(argv, env, work / f"perf-{n}.data", args.symbols > 0))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    what = "testbed chaos" if args.chaos else f"testbed load -s {args.strategy}"
    print(f"{what} against raw RQ: {args.ops} jobs, {args.workers} workers, {os.cpu_count()} cpus")
    print(f"seconds of CPU by role (of which the kernel's), medians of {args.runs}")
    roles = ROLES + sorted({r for runs in results.values() for run in runs for r in run.roles} - set(ROLES))
    print(f"{'':10} {'raw RQ':>16} {'testbed':>16}")
    totals = {}
    for role in roles:
        cells = []
        for side in sides:
            total = statistics.median(run.roles.get(role, (0.0, 0.0))[0] for run in results[side])
            kernel = statistics.median(run.roles.get(role, (0.0, 0.0))[1] for run in results[side])
            cells.append(f"{total:7.2f} ({kernel:5.2f})" if total else f"{'-':>16}")
        print(f"{role:10} {cells[0]:>16} {cells[1]:>16}")
    for side in sides:
        runs = results[side]
        busy = [sum(t for role, (t, _) in run.roles.items() if role not in ("idle", "elsewhere")) for run in runs]
        totals[side] = statistics.median(busy)
    raw, ours = totals.values()
    print(f"{'busy':10} {raw:16.2f} {ours:16.2f}   the lab over raw RQ: {ours / raw:.3f}x")
    if args.symbols:
        _print_places([results[side] for side in sides], args.symbols)


def _print_places(sides: list[list[Sampled]], top: int) -> None:
    """The work-horses' seconds by place, each side's median over its runs."""
    print(f"the work-horses' seconds of CPU by place, medians of {len(sides[0])}, the lab's {top} largest excesses")
    print_excesses([[run.horse_places for run in runs] for runs in sides], top, digits=3)


def print_excesses(sides: list[list[dict[str, float]]], top: int, digits: int) -> None:
    """Raw RQ's runs and the lab's, each a figure by place: each side's median over its runs,
    the `top` places where the lab's exceeds raw RQ's the most first, then all places."""
    places = {place for runs in sides for run in runs for place in run}
    medians = {p: [statistics.median(run.get(p, 0.0) for run in runs) for runs in sides] for p in places}
    print(f"{'raw RQ':>8} {'testbed':>8} {'more':>8}  place")
    rows = sorted(medians.items(), key=lambda item: item[1][0] - item[1][1])[:top]
    totals = [sum(m[i] for m in medians.values()) for i in range(2)]
    for place, (raw, ours) in [*rows, ("all places", totals)]:
        print(f"{raw:8.{digits}f} {ours:8.{digits}f} {ours - raw:+8.{digits}f}  {place}")


if __name__ == "__main__":
    main()
