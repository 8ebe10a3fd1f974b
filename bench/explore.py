"""testbed explore: trials per minute, and how long it takes to find and shrink a counterexample.

    python -m bench.explore [--seeds 1 2 3] [--budget 200]
    python -m bench.explore --hosts 2 [--seeds 1 2 3] [--budget 200]    # as root

For each seed, `testbed explore` on the worked example (examples/lookup_once.py:
it passes every cell of the full matrix, and breaks exactly-once under two
faults on one op): the wall time to a shrunk counterexample, the trials it
took (searching, shrinking, confirming), trials per minute, the size of the
counterexample and how often it reproduced. Then `testbed explore -s
provider-key --budget N` for the first seed: no breach of exactly-once, and
the trials per minute of a search that runs its whole budget. Medians over the
seeds; each run is a whole program, stack start included.

With `--hosts N`: `testbed explore --hosts -s provider-key --scenario none
--budget N` on 1, then 2, ... N worker hosts of their own (network namespaces,
tests/support/namespaces.py; compose.yaml's services, two workers a host), the
trials per minute the run measured, median over the seeds, and each count's
ratio to one host. Every host shares this machine's cores. Only `none`: under
duplicate-enqueue a held request keeps its worker until its duplicate runs,
and on one host's two workers two held requests would wait out the hold.
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
from typing import Any

from bench.support.sides import ROOT
from tests.support import namespaces

EXAMPLE = "examples.lookup_once:send"


def explore(work: Path, args: list[str], env: dict[str, str]) -> tuple[float, dict[str, Any]]:
    out = work / "explore.json"
    argv = [sys.executable, "-m", "testbed", "explore", *args, "--no-store", "--json", str(out)]
    started = time.monotonic()
    subprocess.run(argv, env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.monotonic() - started
    return wall, json.loads(out.read_text())["explore"]


def across_hosts(most: int, seeds: list[int], budget: int) -> None:
    if (why := namespaces.why_not()) is not None:
        sys.exit(f"--hosts: {why}")
    work = Path(tempfile.mkdtemp(prefix="testbed-bench-"))
    print(f"provider-key, {budget} trials a seed, trials per minute on worker hosts of their own (2 workers each):")
    print(f"{'hosts':>5} {'per min':>8} {'ratio':>6}  seeds: per minute, hosts the attempts ran on")
    try:
        first = 0.0
        for count in range(1, most + 1):
            rates, notes = [], []
            with namespaces.running(work / f"hosts{count}", count) as hosts:
                for seed in seeds:
                    args = ["-s", "provider-key", "--scenario", "none", "--budget", str(budget), "--seed", str(seed)]
                    ran = hosts.lab("explore", "--hosts", *args, "--no-store", timeout=1800)
                    if ran.returncode != 0:
                        sys.exit(f"{count} host(s), seed {seed}: exit {ran.returncode}\n{hosts.failed(ran)}")
                    document = json.loads((hosts.workdir("lab") / "explore.json").read_text())
                    rates.append(document["explore"]["trialsPerMinute"])
                    notes.append(f"{seed}: {rates[-1]:.0f}, {len(namespaces.hosts_of(document['rows']))}")
            median = statistics.median(rates)
            first = first or median
            print(f"{count:>5} {median:>8.0f} {median / first:>6.2f}  {'; '.join(notes)}", flush=True)
        load = os.getloadavg()
        print(f"load average at the end: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} cores")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--budget", type=int, default=200, help="provider-key's budget of trials")
    parser.add_argument("--hosts", type=int, metavar="N", help="trials per minute on 1 to N worker hosts (root)")
    args = parser.parse_args()
    if args.hosts is not None:
        across_hosts(args.hosts, args.seeds, args.budget)
        return
    work = Path(tempfile.mkdtemp(prefix="testbed-bench-"))
    env = {**os.environ, "EXAMPLES_DB": str(work / "jobs.sqlite3")}
    try:
        print(f"{EXAMPLE}, a counterexample per seed:")
        print(f"{'seed':>4} {'wall s':>7} {'trials':>7} {'search':>7} {'shrink':>7} {'per min':>8}  counterexample")
        walls, rates = [], []
        for seed in args.seeds:
            wall, found = explore(work, ["--handler", EXAMPLE, "--path", str(ROOT), "--seed", str(seed)], env)
            example = found.get("counterexample")
            shape = "none found"
            if example is not None:
                ops = example["schedule"]["ops"]
                faults = sum(len(op["faults"]) for op in ops)
                shape = f"{len(ops)} op(s), {faults} fault(s), reproduced {example['reproduced']} of {example['runs']}"
            walls.append(wall)
            rates.append(found["trialsPerMinute"])
            trials = (found["trials"], found["searched"], found["shrinking"], found["trialsPerMinute"])
            print(f"{seed:>4} {wall:>7.1f} {trials[0]:>7} {trials[1]:>7} {trials[2]:>7} {trials[3]:>8.0f}  {shape}")
        wall_median, rate_median = statistics.median(walls), statistics.median(rates)
        print(f"median: {wall_median:.1f} s to a shrunk counterexample, {rate_median:.0f} trials/min")
        seed = str(args.seeds[0])
        wall, found = explore(work, ["-s", "provider-key", "--budget", str(args.budget), "--seed", seed], env)
        print(
            f"\nprovider-key, {found['trials']} trials in {wall:.1f} s ({found['trialsPerMinute']:.0f} per minute):"
            f" {found['breaches']} breaches of exactly-once, {found['labFailures']} failures of the lab"
        )
        load = os.getloadavg()
        print(f"load average at the end: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} cores")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
