"""valgrind's callgrind for the instruction-counting benchmarks: its command line, and the counts in what it writes.

A count is what a process executed in user space, the same for the same
program and inputs whatever else the machine does
(`bench/profile/provider_instructions.py`, `bench/profile/horse_instructions.py`).
"""

from __future__ import annotations

import re
import shutil
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

_TOTAL = re.compile(r"^(?:summary|totals): (\d+)", re.MULTILINE)
_COMMAND = re.compile(r"^cmd: (.*)$", re.MULTILINE)


def require() -> None:
    """Before any work: one line and exit 2 without valgrind."""
    if shutil.which("valgrind") is None:
        print("valgrind is not installed", file=sys.stderr)
        sys.exit(2)


def argv(out: str, *options: str) -> list[str]:
    """valgrind under callgrind, writing to `out` (`%p`: the pid). No gdbserver: its
    FIFOs in /tmp outlive every process that dies by a signal under valgrind."""
    return ["valgrind", "--tool=callgrind", "--vgdb=no", *options, f"--callgrind-out-file={out}"]


def counted(path: Path) -> tuple[str, int] | None:
    """The command line a callgrind output file was written for, and its instructions;
    None for a file callgrind never finished (its process was killed, or exec'd a
    program callgrind does not follow)."""
    return _counted(path.read_text(errors="replace"))


def counted_by_object(path: Path) -> tuple[int, Counter[str]] | None:
    """`counted`'s instructions, and the same file's by object (`_by_object`), from one read
    of it; None as for `counted`."""
    text = path.read_text(errors="replace")
    found = _counted(text)
    return None if found is None else (found[1], _by_object(text.splitlines()))


def _counted(text: str) -> tuple[str, int] | None:
    command, total = _COMMAND.search(text), _TOTAL.search(text)
    return None if command is None or total is None else (command.group(1), int(total.group(1)))


def _by_object(lines: Iterable[str]) -> Counter[str]:
    """A callgrind output file's instructions by the object they ran in (the program,
    each shared library or extension module, by file name): each function's own,
    without what it called. Read from the file's cost lines: a line after `calls=`
    is a call's inclusive cost, already counted where the callee's own lines are."""
    names: dict[str, str] = {}  # callgrind's name compression: "(id) name" once, "(id)" after
    costs: Counter[str] = Counter()
    current, skip = "?", False
    for line in lines:
        if skip:
            skip = False
        elif line[:1].isdigit() or line[:1] in "+-*":
            fields = line.split()
            if len(fields) > 1:
                costs[current] += int(fields[1])
        elif line.startswith(("ob=", "cob=")):
            name = _named(line.split("=", 1)[1].strip(), names)
            if line.startswith("ob="):
                current = name
        elif line.startswith("calls="):
            skip = True
    return costs


def _named(spec: str, names: dict[str, str]) -> str:
    if not spec.startswith("("):
        return Path(spec).name
    ident, _, name = spec.partition(")")
    if name.strip():
        names[ident] = Path(name.strip()).name
    return names.get(ident, "?")
