"""What each page a worker holds resident costs every job, and how many more the lab's worker holds than raw RQ's.

    python -m bench.profile.fork_cost [--forks 300] [--rounds 6] [--extra-mb 16]

RQ forks a work-horse for every job: the kernel copies the worker's page
tables at the fork, every resident page of its memory, and tears the
work-horse's down at its exit, whatever the job does. So a worker that holds
more costs more on every job. Measured in a process that holds what the lab's
worker holds after its imports (the zygote's preload, `workers/zygote.py`),
forking children that exit at once, --forks a round; in rounds taking turns
with the same process holding --extra-mb more in small objects, as imports
leave them. Printed: the CPU a fork and exit costs (the process's and its
children's, medians of --rounds) each way, and the difference per page. Then
raw RQ's worker, after the imports of its `rq worker` (RQ's command line and
the worker class the benchmarks give it), in rounds of its own in the same
turns: what it holds (`RssAnon`) and its fork and exit; the lab's worker's
pages over it, at that cost per page, are what the lab's worker's size adds
to a job. A running worker holds a little more than its imports (its first
jobs' allocations); the difference is taken at the same point on both sides.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from bench.support.sides import ROOT, cpu_used

PAGE_KB = os.sysconf("SC_PAGESIZE") // 1024


def resident_kb() -> int:
    """This process's resident anonymous memory: the pages a fork copies the page tables of."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    raise RuntimeError("no RssAnon in /proc/self/status (Linux only)")


def _hold(side: str, extra_mb: int) -> list[bytes]:
    """Import what `side`'s worker imports (and make `extra_mb` of small objects, kept)."""
    if side == "lab":
        from labcore.collector import uncollected
        from workers.zygote import _preload

        with uncollected():  # as the zygote makes them
            _preload()
    else:
        import rq.cli  # noqa: F401

        import workers.worker  # noqa: F401
    # Small objects of a few sizes, as imports leave them: pymalloc's pages, each written.
    return [bytes(100 + i % 50) for i in range(extra_mb * 1024 * 1024 // 150)]


def _child(side: str, extra_mb: int, forks: int) -> None:
    """One round in a process of its own: what it holds, and the CPU of each fork and exit."""
    kept = _hold(side, extra_mb)
    started = cpu_used()
    for _ in range(forks):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    per_fork = (cpu_used() - started) / forks
    print(json.dumps({"kb": resident_kb(), "us": per_fork * 1e6}))
    del kept  # held through the forks


def _round(side: str, extra_mb: int, forks: int) -> dict[str, float]:
    argv = [sys.executable, "-m", "bench.profile.fork_cost", "--child", side, "--extra-mb", str(extra_mb)]
    argv += ["--forks", str(forks)]
    out = subprocess.run(argv, check=True, capture_output=True, text=True, cwd=ROOT).stdout
    measured: dict[str, float] = json.loads(out.splitlines()[-1])
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--forks", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--extra-mb", type=int, default=16)
    parser.add_argument("--child", choices=["lab", "raw"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.extra_mb, args.forks)
        return
    if args.forks < 1 or args.rounds < 1 or args.extra_mb < 1:
        parser.error("--forks, --rounds and --extra-mb must be 1 or more")
    base, more, raw = [], [], []
    for _ in range(args.rounds):  # taking turns: the machine's drift falls on both alike
        base.append(_round("lab", 0, args.forks))
        more.append(_round("lab", args.extra_mb, args.forks))
        raw.append(_round("raw", 0, args.forks))
    us_base, us_more, us_raw = (statistics.median(r["us"] for r in rounds) for rounds in (base, more, raw))
    kb_base, kb_more, kb_raw = (statistics.median(r["kb"] for r in rounds) for rounds in (base, more, raw))
    per_page = (us_more - us_base) / ((kb_more - kb_base) / PAGE_KB)
    print(f"fork and exit, {args.forks} forks a round, medians of {args.rounds} rounds, {os.cpu_count()} cpus:")
    print(f"  the lab's worker, holding {kb_base:,.0f} KB:  {us_base:,.0f} µs of CPU a fork and exit")
    print(f"  holding {args.extra_mb} MB more ({kb_more:,.0f} KB):  {us_more:,.0f} µs")
    print(f"  a resident page: {per_page:.2f} µs a fork and exit")
    extra_pages = (kb_base - kb_raw) / PAGE_KB
    print(f"raw RQ's worker, holding {kb_raw:,.0f} KB after its imports:  {us_raw:,.0f} µs")
    added = extra_pages * per_page / 1000
    print(f"  the lab's holds {extra_pages:,.0f} pages more: {added:.3f} ms of CPU a job at that cost per page")


if __name__ == "__main__":
    main()
