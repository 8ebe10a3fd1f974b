"""valgrind's callgrind for the instruction-counting benchmarks: its command line, and the counts in what it writes.

A count is what a process executed in user space, the same for the same
program and inputs whatever else the machine does
(`bench/provider_instructions.py`, `bench/horse_instructions.py`).
"""

from __future__ import annotations

import re
import shutil
import sys
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
    text = path.read_text(errors="replace")
    command, total = _COMMAND.search(text), _TOTAL.search(text)
    return None if command is None or total is None else (command.group(1), int(total.group(1)))
