"""Which of the interpreter's functions take the work-horses' page faults, raw RQ against the lab.

    python -m bench.profile.fault_sites [--chaos | --ops 600 --workers 2] [--runs 1] [--top 30]

Each side runs as its own program, as `cpu_by_role.py` runs them, under
`perf record -a -e exceptions:page_fault_user`: every page fault a process
takes in user space, with the address of the instruction that took it. A
work-horse's fault is charged to that instruction's function, found in
libpython's symbol table (`nm`) through the mappings perf recorded, or to
its library, and counted apart for writes (most of them the copy of a page
the work-horse shares with its worker) and reads. Printed: faults per
work-horse by function on each side (medians of --runs), the lab's largest
excesses first. Where the interpreter takes them says what the work-horse
did to a shared page: a call (`_PyEvalFramePushAndInit`: the function and
its code, their reference counts), a bytecode's reference to an object
(`_PyEval_EvalFrameDefault`), a miss in the type attribute cache
(`_PyType_Lookup`, `find_name_in_mro`), an allocation (`_PyObject_Malloc`).
Needs perf (Debian's linux-perf), nm (binutils) and leave to trace the whole
machine (root, or kernel.perf_event_paranoid at -1).
"""

from __future__ import annotations

import argparse
import bisect
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

from bench.profile.cpu_by_role import Tree, print_excesses, recorded
from bench.support.sides import compile_project, parse_sides, programs

# A file mapped (pid, start, length, offset in the file, path); a fault (command, pid, instruction, error code).
_MMAP = re.compile(
    r"PERF_RECORD_MMAP2? (\d+)/\d+: \[(0x[0-9a-f]+)\((0x[0-9a-f]+)\) @ (0x[0-9a-f]+|0)\b.*?\]: \S+ (\S+)"
)
_FAULT = re.compile(
    r"^\s*(.*?)\s+(\d+)/\d+\s+exceptions:page_fault_user:\s+address=0x[0-9a-f]+\s+"
    r"ip=(0x[0-9a-f]+)\s+error_code=(0x[0-9a-f]+)"
)
_WRITE = 0x2  # the page fault error code's bit for a write


class Symbols:
    """A shared library's functions by their offset in its file (its symbol table)."""

    def __init__(self, library: str) -> None:
        listed = subprocess.run(["nm", "-n", library], capture_output=True, text=True, check=True).stdout
        rows = [line.split() for line in listed.splitlines()]
        functions = [(int(row[0], 16), row[2]) for row in rows if len(row) == 3 and row[1] in "tTwW"]
        self._starts = [start for start, _ in functions]
        self._names = [name for _, name in functions]

    def at(self, offset: int) -> str:
        i = bisect.bisect_right(self._starts, offset) - 1
        return self._names[i] if i >= 0 else "?"


def faults(argv: list[str], env: dict[str, str], out: Path, python: Symbols) -> tuple[Counter[str], int]:
    """The work-horses' user page faults by the place that took them, and the work-horses' number."""
    script = ["--show-mmap-events", "-F", "comm,pid,tid,event,trace"]
    tree, lines = recorded(argv, env, out, ["-e", "exceptions:page_fault_user"], script)
    maps: dict[int, list[tuple[int, int, int, str]]] = defaultdict(list)
    taken: Counter[tuple[int, int, bool]] = Counter()
    for line in lines:
        if (mapped := _MMAP.search(line)) is not None:
            start, length, offset = (int(mapped.group(i), 16) for i in (2, 3, 4))
            maps[int(mapped.group(1))].append((start, length, offset, mapped.group(5)))
        elif (fault := _FAULT.match(line)) is not None:
            pid = int(fault.group(2))
            tree.named(pid, fault.group(1))
            taken[pid, int(fault.group(3), 16), bool(int(fault.group(4), 16) & _WRITE)] += 1
    places: Counter[str] = Counter()
    horses = set()
    for (pid, ip, write), count in taken.items():
        if tree.role(pid) == "horse":
            horses.add(pid)
            places[f"{'write' if write else 'read '} {_place(tree, maps, pid, ip, python)}"] += count
    return places, len(horses)


def _place(tree: Tree, maps: dict[int, list[tuple[int, int, int, str]]], pid: int, ip: int, python: Symbols) -> str:
    """The function (in libpython) or the library at `ip`, in the mappings of `pid` or the
    nearest of its ancestors perf saw map files (a forked child inherits its parent's)."""
    process: int | None = pid
    while process is not None:
        for start, length, offset, path in maps.get(process, []):
            if start <= ip < start + length:
                return python.at(ip - start + offset) if "libpython" in path else Path(path).name
        process = tree.parent.get(process)
    return "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=30)
    args = parse_sides(parser, ops=600, workers=2)
    if args.top < 1:
        parser.error("--top must be 1 or more")
    for tool, package in (("perf", "linux-perf"), ("nm", "binutils")):
        if shutil.which(tool) is None:
            print(f"{tool} is not installed (Debian's {package})", file=sys.stderr)
            sys.exit(2)
    if os.geteuid() != 0 and int(Path("/proc/sys/kernel/perf_event_paranoid").read_text()) > -1:
        print("tracing the whole machine needs root or kernel.perf_event_paranoid at -1", file=sys.stderr)
        sys.exit(2)
    library = Path(sysconfig.get_config_var("LIBDIR") or "", sysconfig.get_config_var("INSTSONAME") or "")
    if not sysconfig.get_config_var("Py_ENABLE_SHARED") or not library.is_file():
        print("this Python has no shared libpython: its functions are not in a file of their own", file=sys.stderr)
        sys.exit(2)
    from workers.worker import CLASS_PATH

    python = Symbols(str(library))
    compile_project()
    work = Path(tempfile.mkdtemp(prefix="testbed-bench-"))
    per_horse: dict[str, list[dict[str, float]]] = defaultdict(list)
    try:
        env, sides = programs(CLASS_PATH, work, args.ops, args.workers, args.strategy, args.chaos)
        for n in range(args.runs):
            for side, argv in sides.items():
                places, horses = faults(argv, env, work / f"perf-{n}.data", python)
                per_horse[side].append({place: count / horses for place, count in places.items()})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    what = "testbed chaos" if args.chaos else f"testbed load -s {args.strategy}"
    print(f"{what} against raw RQ: {args.ops} jobs, {args.workers} workers; medians of {args.runs}")
    print(f"user page faults per work-horse by where they were taken, the lab's {args.top} largest excesses")
    print_excesses(list(per_horse.values()), args.top, digits=1)


if __name__ == "__main__":
    main()
