"""Where a work-horse's page faults come from, by file and line: raw RQ against `testbed load`.

    python -m bench.profile.fault_lines [--ops 300] [--workers 2] [--top 12]

A freshly forked work-horse pays a copy-on-write page fault for every page of
its worker's that it writes to first (a few µs of CPU each: `job_profile.py`
measures it), and most of a no-op job's are RQ's own. To say which code
touches them, each side runs as its own program (`raw_rq.py`, no-op jobs,
and `testbed load --kill-rate 0 -s provider-key`) with its workers of this
module's class, the lab's (RQ's forking Worker), whose work-horses trace
themselves (`sys.settrace`) and charge each line with the minor page faults
(`getrusage`) counted between it and the next traced event: a C call's faults
go to the line that made it. The tracer's own first touches land on the line
it interrupts, a few per work-horse. Printed, as faults per work-horse: the
files with the most, each side; then, for the lab, its handler's share and
the lines inside the handler's calls with the most.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

from bench.support.sides import ROOT, compile_project, programs
from bench.support.timed_worker import minor_faults
from workers.worker import Worker

OUT = os.environ.get("FAULT_LINES_DIR", ".")
# The workers import this module by its package's name (run with -m, it is `__main__` here).
CLASS = "bench.profile.fault_lines.FaultLinesWorker"
# The lab's workers preload its handler before RQ loads this class; raw RQ's workers do not.
_HANDLER = sys.modules["workers.handler"].perform.__code__ if "workers.handler" in sys.modules else None


class FaultLinesWorker(Worker):
    def main_work_horse(self, job: Any, queue: Any) -> None:
        charged: Counter[tuple[bool, str]] = Counter()
        last: list[Any] = [None, minor_faults(), 0]  # the line charged next, the count then, depth in the handler

        def trace(frame: FrameType, event: str, _: Any) -> Any:
            now = minor_faults()
            if last[0] is not None and now != last[1]:
                charged[last[0]] += now - last[1]
            code = frame.f_code
            if code is _HANDLER and event in ("call", "return"):
                last[2] += 1 if event == "call" else -1
            where = f"{code.co_filename}:{frame.f_lineno} {code.co_name}"
            last[0], last[1] = (last[2] > 0 or code is _HANDLER, where), minor_faults()
            return trace

        exit_now = os._exit

        def _exit(code: int) -> None:
            sys.settrace(None)
            lines = [f"{int(inside)}\t{count}\t{where}\n" for (inside, where), count in charged.items()]
            Path(OUT, f"{os.getpid()}.lines").write_text("".join(lines))
            exit_now(code)

        os._exit = _exit  # type: ignore[assignment]  # os._exit is typed NoReturn; the stand-in ends the process too
        sys.settrace(trace)
        super().main_work_horse(job, queue)


def read(folder: Path) -> tuple[int, Counter[tuple[bool, str]]]:
    """The work-horses traced, and their faults by (inside the handler, file:line function)."""
    total: Counter[tuple[bool, str]] = Counter()
    horses = list(folder.glob("*.lines"))
    for horse in horses:
        for line in horse.read_text().splitlines():
            inside, count, where = line.split("\t")
            total[(inside == "1", where)] += int(count)
    return len(horses), total


def by_file(faults: Counter[tuple[bool, str]]) -> Counter[str]:
    files: Counter[str] = Counter()
    for (_, where), count in faults.items():
        files[where.rsplit(":", 1)[0]] += count
    return files


def short(path: str) -> str:
    """A file's path from its package on (site-packages, the standard library, this project)."""
    for marker in ("site-packages/", "python3.11/", f"{ROOT}/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=300)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    if min(args.ops, args.workers, args.top) < 1:
        parser.error("--ops, --workers and --top are at least 1")
    compile_project()
    work = Path(tempfile.mkdtemp(prefix="testbed-bench-"))
    env, sides = programs(CLASS, work, args.ops, args.workers)
    try:
        traced = {}
        for side, argv in sides.items():
            folder = work / side.replace(" ", "-")
            folder.mkdir()
            env_side = env | {"FAULT_LINES_DIR": str(folder)}
            subprocess.run(argv, env=env_side, stdout=subprocess.DEVNULL, cwd=ROOT, check=True)
            traced[side] = read(folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{args.ops} jobs on {args.workers} workers a side; minor page faults per work-horse")
    for side, (horses, faults) in traced.items():
        print(f"\n{side}: {sum(faults.values()) / horses:.0f} in all, {horses} work-horses; by file:")
        for file, count in by_file(faults).most_common(args.top):
            print(f"  {count / horses:7.1f}  {short(file)}")
    horses, faults = traced["testbed"]
    inside = Counter({where: count for (within, where), count in faults.items() if within})
    print(f"\nthe lab's handler: {sum(inside.values()) / horses:.0f} a work-horse; by line:")
    for where, count in inside.most_common(args.top):
        print(f"  {count / horses:7.1f}  {short(where)}")


if __name__ == "__main__":
    main()
