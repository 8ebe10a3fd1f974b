"""Kill-to-replay latency: how long a killed job takes to run again, by kind of kill and recovery.

    python bench/replay_latency.py [--ops 20] [--every 5] [--rq-default]

Each mode is one `testbed replay` run (provider-key, kill at after-effect);
the latency runs from the confirmed SIGKILL to the start of the next attempt,
so it includes RQ noticing, requeueing and the wait behind the queue.
RQ's default settings take over 10 minutes per kill: `--rq-default` adds them.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

TUNED = ["--worker-ttl", "20", "--maintenance-interval", "5", "--job-monitoring-interval", "5"]
MODES = [
    ("kill (work-horse)", ["--fault", "kill"]),
    ("kill-worker + forced recovery", ["--fault", "kill-worker", "--recovery", "forced"]),
    ("kill-worker + rq recovery, tuned", ["--fault", "kill-worker", "--recovery", "rq", *TUNED]),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=20)
    parser.add_argument("--every", type=int, default=5)
    parser.add_argument("--rq-default", action="store_true")
    args = parser.parse_args()
    modes = MODES + (
        [("kill-worker + rq recovery, defaults", ["--fault", "kill-worker", "--recovery", "rq"])]
        if args.rq_default
        else []
    )
    work = Path(tempfile.mkdtemp(prefix="testbed-bench-"))
    try:
        print(f"{'mode':36} kills   min ms   median ms   p99 ms    max ms")
        for name, extra in modes:
            out = work / "replay.json"
            argv = [sys.executable, "-m", "testbed", "replay", "--ops", str(args.ops), "--every", str(args.every)]
            subprocess.run([*argv, *extra, "--json", str(out)], check=True, stdout=subprocess.DEVNULL)
            row = json.loads(out.read_text())["rows"][0]
            stats = row["replayLatencyMs"]
            figures = "".join(f"{stats[k]:>10.1f}" for k in ("min", "median", "p99", "max"))
            print(f"{name:36} {row['kills']:>5}{figures}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
