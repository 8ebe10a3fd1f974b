"""The default 12-cell `testbed chaos` against the article's Node script, in one run.

    python bench/article_speed.py PATH/TO/crash-lab.mjs [--repeat N]

The script is the article's, saved by the user; it is not part of this
project. Both programs run on this machine, one after the other, and the
ratio of their wall times is printed (target: testbed at least 8x faster).
Our wall time includes starting Redis, the provider and the workers.
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
import time
from pathlib import Path


def timed(argv: list[str], cwd: Path, stdout: Path) -> float:
    started = time.perf_counter()
    with open(stdout, "w") as out:
        subprocess.run(argv, cwd=cwd, stdout=out, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("script", type=Path, help="the article's crash-lab.mjs")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    node = shutil.which("node")
    if node is None:
        sys.exit("node is not on PATH: nothing to compare against")
    if not args.script.is_file():
        sys.exit(f"no such file: {args.script}")
    work = Path(tempfile.mkdtemp(prefix="testbed-bench-"))
    try:
        node_times, ours = [], []
        for _ in range(args.repeat):
            node_times.append(timed([node, str(args.script.resolve())], work, work / "node.json"))
            assert json.loads((work / "node.json").read_text())["assertions"] == "passed"
            ours.append(
                timed(
                    [sys.executable, "-m", "testbed", "chaos", "--json", str(work / "ours.json")],
                    work,
                    work / "ours.txt",
                )
            )
            assert json.loads((work / "ours.json").read_text())["verdict"] == "pass"
        node_wall, our_wall = statistics.median(node_times), statistics.median(ours)
        print(f"machine: {os.cpu_count()} cpus; node {subprocess.check_output([node, '--version'], text=True).strip()}")
        print(f"article script (node):  {node_wall:7.1f} s   runs: {', '.join(f'{t:.1f}' for t in node_times)}")
        print(f"testbed chaos:          {our_wall:7.1f} s   runs: {', '.join(f'{t:.1f}' for t in ours)}")
        print(f"speed-up: {node_wall / our_wall:.1f}x (target 8x)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
