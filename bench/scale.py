"""A long load run: does it finish, do the invariants hold, does memory stay flat?

    python -m bench.scale [--ops 100000] [--workers 4] [--strategy provider-key] [--kill-rate 0.05]

Runs `testbed load` and samples the testbed process's resident memory while
it runs; prints the samples against progress, the peak, and the wall time.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--strategy", default="provider-key")
    parser.add_argument("--kill-rate", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="testbed-scale-"))
    try:
        passed = run(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(0 if passed else 1)


def run(args: argparse.Namespace, work: Path) -> bool:
    """The run, its samples and its figures; True if it exited 0 with its cell as expected."""
    out = work / "load.json"
    argv = [sys.executable, "-m", "testbed", "load", "--ops", str(args.ops), "--workers", str(args.workers)]
    argv += ["-s", args.strategy, "--kill-rate", str(args.kill_rate), "--seed", str(args.seed), "--json", str(out)]
    argv += ["--store", str(work / "runs"), "--yes"]  # a long run on purpose: past the CLI's confirm limits
    started = time.monotonic()
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    me = psutil.Process(proc.pid)
    samples: list[tuple[float, float, str]] = []
    last = ""
    assert proc.stderr is not None
    for line in proc.stderr:  # the live line, one every 10 s when not on a terminal
        last = line.strip() or last
        try:
            samples.append((time.monotonic() - started, me.memory_info().rss / 2**20, last))
        except psutil.NoSuchProcess:
            break
    proc.wait()
    wall = time.monotonic() - started
    for at, rss, note in samples[:: max(1, len(samples) // 12)]:
        print(f"{at:8.0f} s  rss {rss:6.1f} MB  {note[:90]}")
    if not out.exists():
        print(f"testbed load exited {proc.returncode} without results: {last}", file=sys.stderr)
        return False
    result = json.loads(out.read_text())
    stored = work / "runs" / result["run"]
    sizes = {f.name: f.stat().st_size / 1e6 for f in stored.iterdir() if f.is_file()}
    logs = sum(f.stat().st_size for f in (stored / "logs").rglob("*") if f.is_file()) / 1e6
    row = result["rows"][0]
    print(f"exit {proc.returncode}; verdict {row['verdict']}; broken: {row['differences'] or 'none'}")
    print(f"effects {row['effects']}, duplicates {row['duplicateEffects']}, missing {row['missingOperations']},")
    print(f"kills {row['kills']}, replays {row['replays']}; peak RSS of the testbed process")
    print(f"{result['options']['peakRssMb']} MB; wall {wall:.0f} s ({args.ops / row['wallSeconds']:.0f} ops/s)")
    files = ", ".join(f"{name} {mb:.1f} MB" for name, mb in sorted(sizes.items()))
    print(f"stored run: {sum(sizes.values()) + logs:.1f} MB ({files}, logs {logs:.1f} MB)")
    return proc.returncode == 0 and row["verdict"] == "pass"


if __name__ == "__main__":
    main()
