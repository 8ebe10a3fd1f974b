"""The cost of the lab's proxy in front of a real destination: the same job, through the lab
and calling the destination directly, each timed as a whole program, in the same run.

    python -m bench.destination [--repeat 3] [--ops 100]

The destination is moto's server (SQS FIFO, `pip install '.[destinations]'`), started
here on a free port. Each side is `testbed chaos` of the control cell (`-b none`: every
request reaches the destination, so both sides do the same work) of the SQS example's
keyed job, with `--destination` and `--evidence` (the queue's own records judge both):

- through the lab: `examples.sqs_fifo:keyed`, its SDK pointed at the lab's proxy
  (`TESTBED_DESTINATION_URL`), which forwards each request to moto's server;
- directly: `bench.support.direct_sqs:keyed`, the same job pointed at moto's server itself.

Each side sends to a queue of its own per run. The ratio is the median of the runs' own
(the sides take turns at going first), the target 1.15x or less.
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
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.support.direct_sqs import DIRECT_ENV
from bench.support.sides import ROOT, compile_project, load_average
from bench.support.whole import Timed, paired, runs, timed
from labcore.procs import free_port

MOTO = Path(sys.executable).with_name("moto_server")
SEND = "X-Amz-Target: AmazonSQS.SendMessage"


@contextmanager
def moto_server() -> Iterator[str]:
    """moto's server on a free port of this machine, stopped at the end."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [str(MOTO), "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(url, timeout=1).close()
                break
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline or proc.poll() is not None:
                    sys.exit("moto_server did not start")
                time.sleep(0.1)
        yield url
    finally:
        proc.kill()
        proc.wait()


def chaos(handler: str, url: str, ops: int, out: Path) -> list[str]:
    return [
        *(sys.executable, "-m", "testbed", "chaos", "-b", "none", "--ops", str(ops), "--no-store"),
        *("--handler", handler, "--path", str(ROOT), "--destination", url),
        *("--evidence", "examples.sqs_fifo:effects", "--destination-effect", SEND, "--json", str(out)),
    ]


def side(handler: str, url: str, ops: int, work: Path, queue: str) -> Timed:
    """One side's run, its queue its own; a run whose verdict is not a pass ends the benchmark."""
    out = work / "side.json"
    os.environ["SQS_QUEUE"] = queue
    took = timed(chaos(handler, url, ops, out), work, work / "side.txt")
    verdict = json.loads(out.read_text())["verdict"]
    if verdict != "pass":
        sys.exit(f"{handler}: the run's verdict is {verdict}, not pass")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--ops", type=int, default=100)
    args = parser.parse_args()
    if not MOTO.is_file():
        sys.exit(f"no moto_server beside {sys.executable}: pip install '.[destinations]'")
    compile_project()
    work = Path(tempfile.mkdtemp(prefix="testbed-bench-"))
    try:
        with moto_server() as url:
            os.environ[DIRECT_ENV] = url
            pairs: list[tuple[Timed, Timed]] = []  # each run's (directly, through the lab)
            for run in range(args.repeat):
                before = load_average()
                sides = {}
                order = ("proxy", "direct") if run % 2 else ("direct", "proxy")
                for name in order:
                    handler = "examples.sqs_fifo:keyed" if name == "proxy" else "bench.support.direct_sqs:keyed"
                    sides[name] = side(handler, url, args.ops, work, f"bench-{run}-{name}.fifo")
                direct, proxy = sides["direct"], sides["proxy"]
                pairs.append((direct, proxy))
                print(
                    f"run ({order[0]} first): directly {direct.wall:.1f} s, through the lab {proxy.wall:.1f} s,"
                    f" {proxy.wall / direct.wall:.2f}x; CPU {direct.cpu:.1f} s and {proxy.cpu:.1f} s,"
                    f" {proxy.cpu / direct.cpu:.2f}x (load average {before} -> {load_average()})"
                )
        print(f"machine: {os.cpu_count()} cpus; {args.ops} ops a side, the control cell, moto's SQS FIFO")
        walls = {"directly:": [d.wall for d, _ in pairs], "through the lab:": [p.wall for _, p in pairs]}
        for label, times in walls.items():
            print(f"{label:16} {statistics.median(times):6.1f} s   runs: {runs(times)}")
        print(
            f"through / directly: {paired(pairs, 'wall'):.2f}x, the median of the runs' ratios (target 1.15x or less)"
        )
        print(f"                    {paired(pairs, 'cpu'):.2f}x in CPU")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
