"""testbed explore: time to a minimal counterexample and trials per minute, smallest first against random.

    python -m bench.explore [--seeds 1 2 3] [--budget 200] [--floor-ops 400]
    python -m bench.explore --hosts 2 [--seeds 1 2 3] [--budget 200]    # as root

For each seed, `testbed explore` on two handlers with a recovery bug each, under
both searches in turn (`--search smallest`, the default, and `--search random`,
the search before it), same run, same seeds: the worked example
(examples/lookup_once.py: a duplicate when its recovery attempt is killed after
its effect) and examples/timeout_trust.py (a loss when its recovery attempt
times out after it looked the op up). For each: the wall time to a confirmed
counterexample, the trials it took (searching, shrinking, confirming), trials
per minute, the counterexample's size and how often it reproduced; medians over
the seeds and the ratio of random's median time to smallest's. Then `-s
provider-key` for the first seed: the whole bounded space smallest first (`--sample
N` of it run on the stack, one stream of cells) against `--search random --budget
N`, as many trials each: no breach of exactly-once, trials per minute (run on the
stack) and schedules decided per minute. Each run is a whole program,
stack start included (printed apart: the wall time less the search's own).

The floor beside them: raw RQ draining `--floor-ops` jobs that do only the I/O
an attempt must do (`bench.support.floor_job`: a fork, two round trips to
Redis, one request to a bare server) on as many fresh workers as explore's
(4): the seconds an attempt costs with nothing else, and the trials per minute
that allows for a run's trials (their attempts as the rows count them).

With `--hosts N`: `testbed explore --hosts -s provider-key --scenario none
--search random --budget N` on 1, then 2, ... N worker hosts of their own
(network namespaces, tests/support/namespaces.py; compose.yaml's services, two
workers a host), the trials per minute the run measured, median over the
seeds, and each count's ratio to one host. Every host shares this machine's
cores. Only `none`: under duplicate-enqueue a held request keeps its worker
until its duplicate runs, and on one host's two workers two held requests would
wait out the hold.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.support.bare_server import floor_server
from bench.support.raw_rq import raw_rq
from bench.support.sides import ROOT, compile_project
from tests.support import namespaces

HANDLERS = ("examples.lookup_once:send", "examples.timeout_trust:send")
SEARCHES = ("smallest", "random")
WORKERS = 4  # explore's default


@dataclass(frozen=True, slots=True)
class Explored:
    wall: float  # the whole program's
    summary: dict[str, Any]  # results.json's `explore`
    attempts: float  # per trial, as its rows count them

    @property
    def shape(self) -> str:
        example = self.summary.get("counterexample")
        if example is None:
            return "none found"
        ops = example["schedule"]["ops"]
        faults = sum(len(op["faults"]) for op in ops)
        return f"{len(ops)} op(s), {faults} fault(s), reproduced {example['reproduced']} of {example['runs']}"


def explore(work: Path, args: list[str], env: dict[str, str]) -> Explored | None:
    out = work / "explore.json"
    out.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "testbed", "explore", *args, "--no-store", "--json", str(out)]
    started = time.monotonic()
    ran = subprocess.run(argv, env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - started
    if ran.returncode not in (0, 1):
        # Said, and left out of the medians: a run whose lab failed found nothing to time.
        last = (ran.stderr.strip().splitlines() or [""])[-1]
        print(f"testbed explore {' '.join(args)}: exit {ran.returncode}: {last}", flush=True)
        return None
    document = json.loads(out.read_text())
    attempts = [sum(f["attempts"] for f in row.get("opFacts") or []) for row in document["rows"]]
    return Explored(wall, document["explore"], statistics.mean(attempts) if attempts else 0.0)


def floor_seconds(work: Path, ops: int) -> float:
    """Seconds an attempt costs with nothing but its processes and round trips, `WORKERS` at a time."""
    with floor_server(work) as (_, url):
        return raw_rq(ops, WORKERS, work, floor=url) / ops


def handlers(work: Path, seeds: list[int], env: dict[str, str]) -> dict[tuple[str, str], list[Explored]]:
    ran: dict[tuple[str, str], list[Explored]] = {}
    print(
        f"{'handler':<28} {'search':<8} {'seed':>4} {'wall s':>7} {'start s':>7} {'trials':>6} {'search':>6}"
        f" {'shrink':>6} {'per min':>7}  counterexample"
    )
    for seed in seeds:
        for handler in HANDLERS:
            # The order of the two searches alternates with the seed: neither always runs on a warmer machine.
            for how in SEARCHES if seed % 2 else SEARCHES[::-1]:
                args = ["--handler", handler, "--path", str(ROOT), "--seed", str(seed), "--search", how]
                done = explore(work, args, env)
                if done is None:
                    continue
                ran.setdefault((handler, how), []).append(done)
                s = done.summary
                print(
                    f"{handler:<28} {how:<8} {seed:>4} {done.wall:>7.1f} {done.wall - s['seconds']:>7.1f}"
                    f" {s['trials']:>6} {s['searched']:>6} {s['shrinking']:>6} {s['trialsPerMinute']:>7.0f}"
                    f"  {done.shape}",
                    flush=True,
                )
    return ran


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
                    args = ["-s", "provider-key", "--scenario", "none", "--search", "random", "--budget", str(budget)]
                    args += ["--seed", str(seed)]
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
    parser.add_argument(
        "--budget", type=int, default=200, help="provider-key's trials: random's budget, smallest first's sample"
    )
    parser.add_argument("--floor-ops", type=int, default=400, help="floor jobs raw RQ drains")
    parser.add_argument("--hosts", type=int, metavar="N", help="trials per minute on 1 to N worker hosts (root)")
    args = parser.parse_args()
    if args.hosts is not None:
        across_hosts(args.hosts, args.seeds, args.budget)
        return
    compile_project()
    work = Path(tempfile.mkdtemp(prefix="testbed-bench-"))
    env = {**os.environ, "EXAMPLES_DB": str(work / "jobs.sqlite3")}
    try:
        ran = handlers(work, args.seeds, env)
        floor = floor_seconds(work, args.floor_ops)
        print(f"\nthe floor: {floor * 1000:.1f} ms an attempt ({WORKERS} workers, {args.floor_ops} floor jobs)")
        print(f"{'handler':<28} {'search':<8} {'to a counterexample':>20} {'per min':>8} {'floor/min':>9}  found")
        for handler in HANDLERS:
            medians = {}
            for how in SEARCHES:
                runs = ran.get((handler, how), [])
                if not runs:
                    print(f"{handler:<28} {how:<8} no run finished")
                    continue
                medians[how] = statistics.median(r.wall for r in runs)
                rate = statistics.median(r.summary["trialsPerMinute"] for r in runs)
                at_floor = statistics.median(60 / (r.attempts * floor) for r in runs)
                found = sum("counterexample" in r.summary for r in runs)
                print(
                    f"{handler:<28} {how:<8} {medians[how]:>18.1f} s {rate:>8.0f} {at_floor:>9.0f}"
                    f"  {found} of {len(runs)} seeds"
                )
            if len(medians) == len(SEARCHES):
                print(f"{'':<28} random / smallest: {medians['random'] / medians['smallest']:.2f}x the time")
        seed = str(args.seeds[0])
        print("\nprovider-key, seed " + seed + ":")
        # As many trials on the stack each: smallest first runs a sample of the bounded space that size.
        for how, extra in (("smallest", ["--sample", str(args.budget)]), ("random", ["--budget", str(args.budget)])):
            done = explore(work, ["-s", "provider-key", "--seed", seed, "--search", how, *extra], env)
            if done is None:
                continue
            s = done.summary
            decided = s.get("bounded", {}).get("tried", s["trials"])
            per_min = decided / s["seconds"] * 60 if s["seconds"] else 0.0
            print(
                f"  {how:<8} {s['trials']} trials run, {decided} schedules decided, in {s['seconds']:.1f} s"
                f" ({s['trialsPerMinute']:.0f} run a minute, {per_min:.0f} decided a minute;"
                f" the floor {60 / (done.attempts * floor):.0f} a minute): {s['breaches']} breaches,"
                f" {s['labFailures']} failures of the lab"
            )
        load = os.getloadavg()
        print(f"load average at the end: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} cores")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
