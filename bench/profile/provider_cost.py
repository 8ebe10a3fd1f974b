"""The provider's CPU per send from freshly forked clients: on a fresh connection each, or on their worker's.

    python -m bench.profile.provider_cost [--sends 1500] [--runs 3] [--inherited] [--paced MS]

The provider is the run's own (`python -m provider` on the run's unix socket,
its token, its bus on a private Redis), and every send is a new op with an
Idempotency-Key, as `provider-key` sends them, from a child forked for it
that connects, sends through the work-horse's client (`workers/client.py`)
and exits. The provider's CPU comes from its process's own times (psutil)
over the sends, one at a time. Baseline, in the same run: a bare asyncio
server on a unix socket in its own process that reads each request and
answers with a fixed 201, no parsing, no store: what one connection and one
request cost any Python server on this machine. Medians of --runs.
Each send on a fresh connection is what a work-horse does with a provider on
the network; with --inherited, the provider is measured a second time with
every child sending on the connection this process keeps for them, as a
lab's worker keeps one on the run's unix socket (`client.keep_open` before
each fork, `client.horse_ended` after): what a connection per send costs the
provider and the sending child. Each child's whole CPU, fork to exit
(`wait4`), is printed too.
Sent back to back, each send finds the server's code and data still in the
caches; in a run, sends come one every few milliseconds between the
work-horses, Redis and the workers, and each finds them cold: the provider
spent 0.6 ms of CPU a send in a load run against 0.26 here. With --paced MS,
every side is sent one send every MS ms, with the caches evicted in between
(this process writes 16 MB): the cost per send a run sees.
To compare event loops, hide uvloop from the provider: a `uvloop.py` that
raises ImportError, on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from bench.support.bare_server import BARE

BODY = {"recipient": "a@example.test", "message": "hello"}
LEDGER = "bench"
WARM = 50  # sends before measuring: a server's first requests import and compile
EVICT = 16 * 1024 * 1024  # written between paced sends: more than the machine's caches hold
PAGE = 4096


def cpu_per_send(
    pid: int, base: str, sends: int, first: int, inherited: bool = False, paced: float = 0.0
) -> tuple[float, float]:
    """ms of the server's CPU per send, each from a freshly forked child, and of the child's
    own. `inherited`: the children send on a connection this process opened. `paced`: ms
    between sends, with the caches evicted in between, as a run's provider is sent them."""
    from workers import client

    children: list[float] = []
    evict = bytearray(EVICT) if paced else None

    def forked(n: int) -> None:
        if evict is not None:
            evict[::PAGE] = bytes(EVICT // PAGE)  # every page written: caches and TLB turned over
            time.sleep(paced / 1000)
        if inherited:
            client.keep_open(base)
        child = os.fork()
        if child == 0:
            code = 1
            try:
                reference = f"op-{n}"
                payload = {"reference": reference, **BODY}
                reply = client.send(base, LEDGER, payload, key=reference, attempt=1, chaos=None, timeout=10)
                code = 0 if reply.status == 201 else 1
            finally:
                os._exit(code)
        _, status, usage = os.wait4(child, 0)
        if inherited:
            client.horse_ended(clean=status == 0)
        children.append(usage.ru_utime + usage.ru_stime)
        if status != 0:
            raise SystemExit(f"a send to {base} was not answered 201")

    server = psutil.Process(pid)
    for n in range(first, first + WARM):  # the server's first requests import and compile
        forked(n)
    before = sum(server.cpu_times()[:2])
    children.clear()
    for n in range(first + WARM, first + WARM + sends):
        forked(n)
    spent = (sum(server.cpu_times()[:2]) - before) * 1000 / sends
    client.drop()
    return spent, statistics.mean(children) * 1000


@contextmanager
def servers(work: Path) -> Iterator[dict[str, tuple[int, str]]]:
    """The run's provider and the bare server, each as (pid, base URL) for the work-horse's client."""
    from labcore.credentials import TOKEN_ENV
    from labcore.endpoints import unix_url
    from labcore.procs import stop_all
    from provider.contract import Contract
    from testbed.infra.provider_process import ProviderAdmin, ProviderProcess
    from testbed.infra.redis_server import PrivateRedis

    redis = PrivateRedis(work)
    url = redis.start()
    process = ProviderProcess(work, url, "bench:provider")
    path = work / "bare.sock"
    server = subprocess.Popen([sys.executable, "-c", BARE, str(path)], stdout=subprocess.PIPE)
    try:
        process.launch()
        process.wait_ready()
        admin = ProviderAdmin(process.url, process.token)
        admin.put_ledger(LEDGER, Contract())
        admin.close()
        assert server.stdout is not None and server.stdout.readline() == b"ready\n"
        os.environ[TOKEN_ENV] = process.token  # the client reads it as it loads
        yield {"provider": (process.pid, process.job_url), "bare server": (server.pid, unix_url(path))}
    finally:
        stop_all([*process.release(), server])
        redis.stop()


INHERITED = "provider, one inherited connection"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=1500)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--inherited", action="store_true", help="the provider again, on one inherited connection")
    parser.add_argument(
        "--paced", type=float, default=0.0, metavar="MS", help="ms between sends, the caches evicted in between"
    )
    args = parser.parse_args()
    sides = ["provider", "bare server", *([INHERITED] if args.inherited else [])]
    server: dict[str, list[float]] = {side: [] for side in sides}
    child: dict[str, list[float]] = {side: [] for side in sides}
    work = Path(tempfile.mkdtemp(prefix="testbed-bench-"))
    try:
        with servers(work) as running:
            for run in range(args.runs):
                for n, side in enumerate(sides):  # taking turns
                    pid, base = running["bare server" if side == "bare server" else "provider"]
                    first = (run * len(sides) + n) * (args.sends + WARM)  # every send a new op
                    ours, theirs = cpu_per_send(pid, base, args.sends, first, side == INHERITED, args.paced)
                    server[side].append(ours)
                    child[side].append(theirs)
                print(
                    ", ".join(f"{side} {server[side][-1]:.3f} ms" for side in sides)
                    + " of CPU per send; each sending child: "
                    + ", ".join(f"{child[side][-1]:.3f} ms" for side in sides)
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ours, floor = (statistics.median(server[side]) for side in ("provider", "bare server"))
    paced = f", {args.paced:g} ms apart with the caches evicted between them" if args.paced else ""
    print(f"{os.cpu_count()} cpus, {args.sends} sends per run{paced}, medians of {args.runs}:")
    print(f"provider {ours:.3f} ms, bare server {floor:.3f} ms of CPU per send: {ours / floor:.2f}x the bare server")
    if args.inherited:
        kept = statistics.median(server[INHERITED])
        fresh, reused = (statistics.median(child[side]) for side in ("provider", INHERITED))
        print(
            f"on one inherited connection: provider {kept:.3f} ms a send ({ours - kept:.3f} less), "
            f"each sending child {reused:.3f} ms against {fresh:.3f} ms ({fresh - reused:.3f} less)"
        )


if __name__ == "__main__":
    main()
