"""Instructions per work-horse, raw RQ's and the lab's, counted by callgrind: what a job costs in user space.

    python -m bench.profile.horse_instructions [--ops 30]

Each side runs as `bench/throughput.py` runs it (raw RQ draining no-op jobs,
`testbed load --kill-rate 0`), on one worker, under `valgrind
--tool=callgrind --trace-children=yes`: every Python process of the program
is counted (Redis, the provider and the helpers they run are not: the
provider's own count is `bench/profile/provider_instructions.py`'s), each from its
fork when it was forked (`--zero-before=PyOS_AfterFork_Child`). A
work-horse's count is then its own, from the fork to its exit: RQ's
bookkeeping, the job, and for the lab its handler. CPU time on a shared VM
drifts by more than the lab's cost from one run to the next; a count does
not. Instructions are not time: the kernel's share (the fork, the
copy-on-write faults, the exit) is not in them (`bench/profile/job_profile.py`
measures it), and a cache miss costs more than an instruction. Needs
valgrind (slow: a minute or two).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.support import callgrind
from bench.support.sides import ROOT, compile_project, programs

# Each side's worker, by its command line; the work-horses it forks have it too.
WORKER = {"raw RQ": "rq.cli worker", "testbed": "workers.zygote"}
# The first work-horses of a worker make its first connections: left out.
SKIP = 2


def horses(side: str, argv: list[str], env: dict[str, str], out: Path) -> list[int]:
    """Each work-horse's instructions, in the order they were forked."""
    out.mkdir()
    grind = callgrind.argv(
        f"{out}/callgrind.%p",
        "--trace-children=yes",
        "--zero-before=PyOS_AfterFork_Child",
        "--trace-children-skip=*redis-server*,/usr/bin/*",
        "--trace-children-skip-by-arg=provider",
    )
    done = subprocess.run([*grind, *argv], env=env, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{side} failed under valgrind: {done.stderr.strip().splitlines()[-1:]}")
    files = sorted(out.glob("callgrind.*"), key=lambda p: int(p.suffix[1:]))
    found = [c for c in map(callgrind.counted, files) if c is not None]
    counts = [total for command, total in found if WORKER[side] in command]
    # In pid order: the lab's zygote, then its worker; raw RQ's worker. The rest are work-horses.
    return counts[2 if side == "testbed" else 1 :]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=30)
    args = parser.parse_args()
    if args.ops <= SKIP:
        parser.error(f"--ops must be more than {SKIP}")
    callgrind.require()
    from workers.worker import CLASS_PATH

    compile_project()
    work = Path(tempfile.mkdtemp(prefix="testbed-bench-"))
    try:
        env, sides = programs(CLASS_PATH, work, args.ops, 1)
        medians = {}
        for side, argv in sides.items():
            counts = horses(side, argv, env, work / side.replace(" ", "-"))[SKIP:]
            if len(counts) < args.ops - SKIP:
                sys.exit(f"{side}: {len(counts)} work-horses counted, {args.ops - SKIP} expected")
            medians[side] = statistics.median(counts)
            print(f"{side:8} {medians[side]:12,.0f} instructions a work-horse (median of {len(counts)})")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    extra = medians["testbed"] - medians["raw RQ"]
    print(f"the lab's work-horse: {extra:+,.0f} ({medians['testbed'] / medians['raw RQ']:.3f}x raw RQ's)")


if __name__ == "__main__":
    main()
