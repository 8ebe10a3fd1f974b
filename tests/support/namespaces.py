"""The lab on hosts of their own: Linux network namespaces, each with its own
address on a private bridge (10.213.0.0/24, used only between them), running
compose.yaml's services as compose.yaml writes them (tests/support/compose.py):
Redis on one, the provider on another, a `testbed host` on each worker host,
the lab on the last. The bridge lives in a namespace of its own: nothing is
added to the machine's own network, and no traffic leaves these namespaces.

Used by the tests across hosts and by `python -m bench.explore --hosts`. Needs root.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from tests.support import compose

SUBNET = "10.213.0"
_MADE = itertools.count(1)  # each set of hosts one process makes has names of its own

# Run in the lab's namespace: until the provider answers and `hosts` worker hosts are registered.
READY = r"""
import os, sys, time
import httpx, redis
url, purl, want = os.environ["REDIS_URL"], os.environ["TESTBED_PROVIDER_URL"], int(sys.argv[1])
deadline = time.monotonic() + 90
while True:
    try:
        r = redis.Redis.from_url(url, socket_connect_timeout=1)
        hosts = list(r.scan_iter("testbed:hosts:live:*"))
        if httpx.get(purl + "/health", timeout=1).status_code == 200 and len(hosts) >= want:
            break
    except (redis.RedisError, httpx.HTTPError):
        pass
    if time.monotonic() > deadline:
        sys.exit("the stack did not come up")
    time.sleep(0.1)
"""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def why_not() -> str | None:
    """Why network namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_SYS_ADMIN); CI runs this test as root"
    if not shutil.which("ip"):
        return "iproute2's `ip` is not installed"
    probe = f"tbh{os.getpid() % 100000}-probe"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot make a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


class Hosts:
    """Namespaces joined by veth pairs to a bridge in a namespace of its own; every process started is tracked."""

    def __init__(self, root: Path, workers: int = 2) -> None:
        self.root = root
        self.tag = f"tbh{os.getpid() % 100000}x{next(_MADE)}"
        self.workers = [f"worker{n}" for n in range(1, workers + 1)]
        names = ["redis", "provider", *self.workers, "lab"]
        self.addresses = {host: n for n, host in enumerate(names, 1)}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.seen: set[tuple[int, float]] = set()
        self.made: list[str] = []
        self.down_done = False
        self.password = secrets.token_hex(24)
        self.token = secrets.token_hex(32)

    def ns(self, host: str) -> str:
        return f"{self.tag}-{host}"

    def up(self) -> None:
        hub = self.ns("hub")
        _ip("netns", "add", hub)
        self.made.append(hub)
        _ip("-n", hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", hub, "link", "set", "br0", "up")
        for host, n in self.addresses.items():
            ns = self.ns(host)
            _ip("netns", "add", ns)
            self.made.append(ns)
            # `ip netns exec` mounts /etc/netns/<ns>/hosts over /etc/hosts: compose's service names resolve.
            etc = Path("/etc/netns") / ns
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(f"127.0.0.1 localhost\n{SUBNET}.1 redis\n{SUBNET}.2 provider\n")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", f"p{n}", "netns", hub)
            _ip("-n", hub, "link", "set", f"p{n}", "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{SUBNET}.{n}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")

    def start_services(self) -> None:
        """Redis, the provider and a host daemon on each worker host, until the lab's host sees them all."""
        self.start("redis", "redis")
        self.start("provider", "provider")
        for host in self.workers:
            self.start(host, "host")
        ready = self.run("lab", [sys.executable, "-c", READY, str(len(self.workers))], "lab", timeout=120)
        assert ready.returncode == 0, self.failed(ready)

    def env(self, service: str) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("TESTBED_", "REDIS_URL", "RQ_"))}
        variables = {"TESTBED_REDIS_PASSWORD": self.password, "TESTBED_PROVIDER_TOKEN": self.token}
        return {**base, "PYTHONPATH": str(compose.ROOT), **compose.environment(service, variables)}

    def workdir(self, host: str) -> Path:
        path = self.root / host
        path.mkdir(exist_ok=True)
        return path

    def start(self, host: str, service: str) -> subprocess.Popen[bytes]:
        with open(self.workdir(host) / f"{service}.log", "ab") as log:
            proc = subprocess.Popen(
                ["ip", "netns", "exec", self.ns(host), *compose.argv(service)],
                env=self.env(service),
                cwd=self.workdir(host),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs[host] = proc
        return proc

    def run(self, host: str, argv: list[str], service: str, timeout: float) -> subprocess.CompletedProcess[str]:
        """A command in a host's namespace, with that service's environment; its processes are watched."""
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.ns(host), *argv],
            env=self.env(service),
            cwd=self.workdir(host),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while proc.poll() is None and time.monotonic() < deadline:
            self.watch()
            time.sleep(0.2)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def lab(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        """`testbed ARGS...` on the lab's host, as compose.yaml's lab service runs it."""
        return self.run("lab", [*compose.argv("lab")[:3], *args], "lab", timeout)

    def failed(self, ran: subprocess.CompletedProcess[str]) -> str:
        """What a failed run printed (the cells that differ are on stdout), then every host's log."""
        logs = "".join(f"\n--- {p}\n{p.read_text(errors='replace')[-2000:]}" for p in self.root.glob("*/*.log"))
        return ran.stdout[-3000:] + ran.stderr[-3000:] + logs

    def watch(self) -> None:
        """Remember every process in our namespaces, to check afterwards that none is left."""
        for ns in self.made:
            for pid in self.pids(ns):
                with contextlib.suppress(psutil.NoSuchProcess):
                    self.seen.add((pid, psutil.Process(pid).create_time()))

    @staticmethod
    def pids(ns: str) -> list[int]:
        found = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
        return [int(p) for p in found.stdout.split()]

    def down(self) -> None:
        if self.down_done:
            return
        self.down_done = True
        self.watch()
        # The lab's side first, Redis last: hosts stop their workers on SIGTERM.
        for host in ("lab", *self.workers, "provider", "redis"):
            proc = self.procs.get(host)
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        for ns in reversed(self.made):
            for pid in self.pids(ns):  # anything still in there: it must not outlive the namespace
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)

    def left(self) -> list[str]:
        """What outlived `down`: namespaces, their /etc/netns files, processes started in them."""
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        out = [line.split()[0] for line in listed.splitlines() if line.startswith(f"{self.tag}-")]
        out += [str(p) for p in Path("/etc/netns").glob(f"{self.tag}-*")]
        for pid, created in self.seen:
            with contextlib.suppress(psutil.NoSuchProcess):
                p = psutil.Process(pid)
                if p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(f"pid {pid}")
        return out


def hosts_of(rows: list[dict[str, Any]]) -> set[str]:
    """The worker hosts the attempts of these results.json rows ran on (a worker is named `<host>.wN`)."""
    events = (e for row in rows for op in row["history"].values() for e in op)
    return {e["worker"].rsplit(".", 1)[0] for e in events if e["event"] == "attempt-start"}


@contextlib.contextmanager
def running(root: Path, workers: int = 2) -> Iterator[Hosts]:
    """Hosts up with their services started and registered; everything stopped and removed on leaving."""
    root.mkdir(parents=True, exist_ok=True)
    made = Hosts(root, workers)
    try:
        made.up()
        made.start_services()
        yield made
    finally:
        made.down()
