"""The lab on hosts of their own: five Linux network namespaces, each with its own
address on a private bridge (10.213.0.0/24, used only between them), running
compose.yaml's services as compose.yaml writes them (tests/support/compose.py):
Redis on one, the provider on another, a host on each of two more, the lab
on the fifth. The bridge lives in a sixth namespace: nothing is added to the
machine's own network, and no traffic leaves these namespaces.

Checks: the article's 12 cells equal a single-host run's, and the stored run
is judged again from what the provider said of its ops; a kill-worker replay
whose jobs come back on the other worker host; the partition fault (an
host cuts its host off from the provider), timeout and late as the model
predicts; every scenario across hosts as the model predicts; the provider refuses a request
without its token (401) and changes nothing; Redis refuses a client without
the password; nothing is left afterwards (processes, namespaces).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from testbed.experiment.scenarios import SCENARIOS
from testbed.lab import results
from testbed.lab.layout import PROVIDER_LOG, PROVIDER_RECORDS
from testbed.report import html
from tests.support import compose
from tests.support.dom import parse
from tests.support.report_page import assert_cell_timeline, label_of

pytestmark = pytest.mark.e2e

SERVICES_RUN = ("redis", "provider", "host", "lab")  # every service of compose.yaml, as written there
SUBNET = "10.213.0"
HOSTS = {"redis": 1, "provider": 2, "worker1": 3, "worker2": 4, "lab": 5}
TAG = f"tbh{os.getpid() % 100000}"
_CELL = ("strategy", "boundary", "fault", "effects", "duplicateEffects", "missingOperations", "kills", "verdict")

PROBE = r"""
import json, os, socket, sys, time
import httpx, redis
url, purl = os.environ["REDIS_URL"], os.environ["TESTBED_PROVIDER_URL"]
auth = {"Authorization": "Bearer " + os.environ["TESTBED_PROVIDER_TOKEN"]}
deadline = time.monotonic() + 90
while True:
    try:
        r = redis.Redis.from_url(url, socket_connect_timeout=1)
        hosts = list(r.scan_iter("testbed:hosts:live:*"))
        if httpx.get(purl + "/health", timeout=1).status_code == 200 and len(hosts) >= 2:
            break
    except (redis.RedisError, httpx.HTTPError):
        pass
    if time.monotonic() > deadline:
        sys.exit("the stack did not come up")
    time.sleep(0.1)
out = {}
try:
    redis.Redis(host="redis", port=6379, socket_connect_timeout=2).ping()
    out["redisOpen"] = True
except redis.RedisError as exc:
    out["redisOpen"], out["redisError"] = False, str(exc)
with socket.create_connection(("redis", 6379), timeout=2) as raw:  # RESP2, as any client speaks it
    raw.sendall(b"PING\r\n")
    out["rawPing"] = raw.recv(200).decode()
ledger, body = "probe-ledger", {"reference": "r1", "recipient": "a@example.com", "message": "m"}
out["putNoToken"] = httpx.put(purl + "/ledgers/" + ledger, json={}).status_code
out["sendNoToken"] = httpx.post(purl + "/ledgers/" + ledger + "/effects", json=body).status_code
out["lookupAfter"] = httpx.get(purl + "/ledgers/" + ledger + "/effects/r1", headers=auth).status_code
out["auditAfter"] = httpx.post(purl + "/ledgers/" + ledger + "/audit", json={"references": ["r1"]}, headers=auth).json()
print(json.dumps(out))
"""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_SYS_ADMIN); CI runs this test as root"
    if not shutil.which("ip"):
        return "iproute2's `ip` is not installed"
    probe = f"{TAG}-probe"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot make a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


class Hosts:
    """Namespaces joined by veth pairs to a bridge in a namespace of its own; every process started is tracked."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.seen: set[tuple[int, float]] = set()
        self.made: list[str] = []
        self.down_done = False
        self.probe: dict = {}
        self.password = secrets.token_hex(24)
        self.token = secrets.token_hex(32)

    @staticmethod
    def ns(host: str) -> str:
        return f"{TAG}-{host}"

    def up(self) -> None:
        hub = self.ns("hub")
        _ip("netns", "add", hub)
        self.made.append(hub)
        _ip("-n", hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", hub, "link", "set", "br0", "up")
        for host, n in HOSTS.items():
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
        for host in ("lab", "worker1", "worker2", "provider", "redis"):
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


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    reason = _why_not()
    if reason:
        pytest.skip(reason)
    made = Hosts(tmp_path_factory.mktemp("hosts"))
    try:
        made.up()
        made.start("redis", "redis")
        made.start("provider", "provider")
        made.start("worker1", "host")
        made.start("worker2", "host")
        probe = made.run("lab", [sys.executable, "-c", PROBE], "lab", timeout=120)
        assert probe.returncode == 0, _failed(probe, made)
        made.probe = json.loads(probe.stdout)
        yield made
    finally:
        made.down()


def _failed(ran: subprocess.CompletedProcess[str], hosts: Hosts) -> str:
    """What a failed run printed (the cells that differ are on stdout), then every host's log."""
    logs = "".join(f"\n--- {p}\n{p.read_text(errors='replace')[-2000:]}" for p in hosts.root.glob("*/*.log"))
    return ran.stdout[-3000:] + ran.stderr[-3000:] + logs


@pytest.fixture(scope="module")
def lab_run(hosts):
    """compose.yaml's lab service, on the lab's host."""
    ran = hosts.run("lab", compose.argv("lab"), "lab", timeout=240)
    assert ran.returncode == 0, _failed(ran, hosts)
    return ran


def test_redis_refuses_a_client_without_the_password(hosts):
    assert hosts.probe["redisOpen"] is False
    assert "authenticat" in hosts.probe["redisError"].lower()
    assert hosts.probe["rawPing"].startswith("-NOAUTH")


def test_provider_refuses_a_request_without_the_token_and_changes_nothing(hosts):
    assert (hosts.probe["putNoToken"], hosts.probe["sendNoToken"]) == (401, 401)
    # The refused PUT made no ledger, the refused send logged nothing.
    assert hosts.probe["lookupAfter"] == 404
    assert hosts.probe["auditAfter"] == {"effects": 0, "records": {}}


def test_article_cells_across_hosts_equal_the_single_host_run(hosts, lab_run, default_chaos):
    across = json.loads((hosts.workdir("lab") / "results.json").read_text())
    assert across["options"]["redis"] == "shared"
    assert default_chaos.code == 0, default_chaos.stderr[-3000:]
    local = default_chaos.results
    cells = [tuple(r[k] for k in _CELL) for r in across["rows"]]
    assert len(cells) == 12
    assert cells == [tuple(r[k] for k in _CELL) for r in local["rows"]]
    # The run's workers were the hosts', and they stopped when the run ended (each host alone in its host).
    assert {r["workers"] for r in across["rows"]} == {4}
    for host in ("worker1", "worker2"):
        assert hosts.pids(hosts.ns(host)) == [hosts.procs[host].pid]


def test_a_run_on_a_network_provider_is_kept_and_judged_again_from_what_the_provider_said(hosts, lab_run):
    stored = (hosts.workdir("lab") / "runs" / "latest").resolve()
    assert (stored / PROVIDER_RECORDS).is_file() and not (stored / PROVIDER_LOG).exists()  # its log stays on its host
    check = [*compose.argv("lab")[:3], "check"]
    ran = hosts.run("lab", [*check, "latest", "--store", "runs"], "lab", timeout=60)
    assert ran.returncode == 0, _failed(ran, hosts)
    assert "12/12 cells as expected" in ran.stdout
    # One effect fewer in what the provider said of one op: the check names that op.
    altered = hosts.workdir("lab") / "altered"
    shutil.copytree(stored, altered)
    lines = [json.loads(line) for line in (altered / PROVIDER_RECORDS).read_text().splitlines()]
    op, record = next((op, r) for line in lines for op, r in line["records"].items() if r["effects"] == 1)
    record["effects"] = 0
    (altered / PROVIDER_RECORDS).write_text("".join(json.dumps(line) + "\n" for line in lines))
    ran = hosts.run("lab", [*check, str(altered)], "lab", timeout=60)
    assert ran.returncode == 1, _failed(ran, hosts)
    assert "DIFFERS" in ran.stdout and op in ran.stdout


def test_kill_worker_replay_comes_back_on_the_other_worker_host(hosts, lab_run):
    # 12 kills: the chance that no job crosses to the other host is about (1/2)^12.
    argv = [*compose.argv("lab")[:3], "replay", "--hosts", "--fault", "kill-worker", "--ops", "48", "--every", "4"]
    ran = hosts.run("lab", [*argv, "--no-store", "--json", "replay.json"], "lab", timeout=180)
    assert ran.returncode == 0, _failed(ran, hosts)
    row = json.loads((hosts.workdir("lab") / "replay.json").read_text())["rows"][0]
    assert (row["kills"], row["effects"], row["duplicateEffects"], row["missingOperations"]) == (12, 48, 0, 0)
    crossed = 0
    for events in row["history"].values():
        killed = next(e for e in events if e["event"] == "killed")
        second = next(e for e in events if e["event"] == "attempt-start" and e["attempt"] == 2)
        assert len(killed["pids"]) == 2 and killed["confirmedMs"] >= 0  # worker and work-horse, by its host
        crossed += killed["worker"].rsplit(".", 1)[0] != second["worker"].rsplit(".", 1)[0]
    assert crossed >= 1, "no killed job came back on the other worker host"


def test_partition_timeout_and_late_across_hosts_agree_with_the_model(hosts, lab_run):
    """Each partitioned op's host is cut off from the provider by its host; the provider's
    answer goes into the cut and the client times out. Exit 0: every count as the
    model predicts (for a partition, as for a timeout, which runs beside it, with late)."""
    faults = ["--fault", "partition", "--fault", "timeout", "--fault", "late"]
    argv = [*compose.argv("lab")[:3], "chaos", "--hosts", *faults, "--ops", "20"]
    ran = hosts.run("lab", [*argv, "--no-store", "--json", "partition.json"], "lab", timeout=240)
    assert ran.returncode == 0, _failed(ran, hosts)
    rows = json.loads((hosts.workdir("lab") / "partition.json").read_text())["rows"]
    assert {r["fault"] for r in rows if r["boundary"] != "none"} == {"partition", "timeout", "late"}
    cut = [r for r in rows if r["fault"] == "partition"]
    assert len(cut) == 8 and all(r["faults"] == 2 and r["kills"] == 0 for r in cut)
    for row in cut:
        partitioned = {op: events for op, events in row["history"].items() if _has(events, "partitioned")}
        assert len(partitioned) == row["faults"], row["history"]
        for op, events in partitioned.items():
            cut_at = next(e for e in events if e["event"] == "partitioned")
            timed_out = next(e for e in events if e["event"] == "call-timeout" and e["attempt"] == cut_at["attempt"])
            healed = next(e for e in events if e["event"] == "healed")
            retry = next(e for e in events if e["event"] == "attempt-start" and e["attempt"] == cut_at["attempt"] + 1)
            # The provider was done with the request (after the effect: it had answered) before the client gave
            # up: the answer was lost in the cut. The host was back before the op's next attempt.
            assert cut_at["letGo"] < timed_out["at"] < healed["at"] < retry["at"], (op, events)
            assert cut_at["host"] == cut_at["worker"].rsplit(".", 1)[0]
    # The report draws each cut on its op's row, as what it is
    page = parse(html.render(results.parse((hosts.workdir("lab") / "partition.json").read_bytes())))
    for row in cut:
        figure = page.one("figure", "cell-timeline", data_cell=label_of(row))
        assert_cell_timeline(figure, row)
        assert len(figure.find_all("g", "cut")) == row["faults"]
    # Healed: both worker hosts reach the provider again, and no cut rule is left on either.
    for host in ("worker1", "worker2"):
        rules = hosts.run(host, ["ip", "rule", "show"], "host", timeout=10).stdout
        assert "blackhole" not in rules and rules.startswith("0:"), rules


def test_every_scenario_across_hosts_agrees_with_the_model(hosts, lab_run):
    """The scenarios' world changes go over the network too: the provider's admin
    routes (expired keys, withdrawals), a duplicate job racing a held request, a
    re-minted op. Exit 0: every cell as the model predicts."""
    scenarios = [name for name in SCENARIOS if name != "none"]
    argv = [*compose.argv("lab")[:3], "chaos", "--hosts", "--matrix", "full", "--ops", "10"]
    argv += [arg for name in scenarios for arg in ("--scenario", name)]
    ran = hosts.run("lab", [*argv, "--no-store", "--json", "scenarios.json"], "lab", timeout=240)
    assert ran.returncode == 0, _failed(ran, hosts)
    rows = json.loads((hosts.workdir("lab") / "scenarios.json").read_text())["rows"]
    assert {r["scenario"] for r in rows} == set(scenarios)
    assert all(r["verdict"] == "pass" for r in rows)
    assert all(r["faults"] >= 1 for r in rows if r["boundary"] != "none")


def _has(events: list[dict], kind: str) -> bool:
    return any(e["event"] == kind for e in events)


def test_nothing_is_left_afterwards(hosts, lab_run):
    hosts.down()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert TAG not in listed
    assert not any(Path("/etc/netns").glob(f"{TAG}-*"))
    alive = []
    for pid, created in hosts.seen:
        with contextlib.suppress(psutil.NoSuchProcess):
            p = psutil.Process(pid)
            if p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
    assert hosts.seen and alive == []
