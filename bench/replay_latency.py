"""Kill-to-replay latency: how long a killed job takes to run again, by kind of kill and recovery.

    python -m bench.replay_latency [--ops 20] [--every 5] [--rq-default]

Each mode is one `testbed replay` run (provider-key, kill at after-effect).
"requeued" runs from the SIGKILL to the moment the job is back in the queue
(RQ noticing and requeueing it); "replayed" to the start of the next attempt,
so it adds the wait behind the queue and for a free worker.
RQ's default settings take over 10 minutes per kill: `--rq-default` adds them.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

TUNED = ["--worker-ttl", "20", "--maintenance-interval", "5", "--job-monitoring-interval", "5"]
MODES = [
    ("kill (work-horse)", ["--fault", "kill"]),
    ("kill-worker + forced recovery", ["--fault", "kill-worker", "--recovery", "forced"]),
    ("kill-worker + rq recovery, tuned", ["--fault", "kill-worker", "--recovery", "rq", *TUNED]),
]


def _killed(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    return next((e for e in events if e["event"] == "killed"), None)


def _requeue_ms(events: list[dict[str, Any]]) -> float:
    killed = _killed(events)
    assert killed is not None
    again = next(e for e in events if e["event"] == "attempt-start" and e["attempt"] > killed["attempt"])
    return float(again["enqueuedAt"] - killed["at"]) * 1000


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
        print(f"{'mode':34} kills  requeued ms (median, max)  replayed ms (min / median / p99 / max)")
        for name, extra in modes:
            out = work / "replay.json"
            argv = [sys.executable, "-m", "testbed", "replay", "--ops", str(args.ops), "--every", str(args.every)]
            quiet = subprocess.DEVNULL
            subprocess.run([*argv, *extra, "--json", str(out), "--no-store"], check=True, stdout=quiet, stderr=quiet)
            row = json.loads(out.read_text())["rows"][0]
            requeued = sorted(_requeue_ms(events) for events in row["history"].values() if _killed(events))
            stats = row["replayLatencyMs"]
            replayed = " / ".join(f"{stats[k]:.1f}" for k in ("min", "median", "p99", "max"))
            back = f"{statistics.median(requeued):>10.1f} {requeued[-1]:>10.1f}"
            print(f"{name:34} {row['kills']:>5}  {back}      {replayed}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
