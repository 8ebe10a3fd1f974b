"""The host on its own (one host, loopback): it serves a run that names it, refuses
to kill a pid that is not a work-horse of its workers, stops the run's workers
when the run's controller stops beating, and leaves nothing when it stops.
What --hosts cannot do is refused before anything starts.

The run here is played by the test through labcore.hosts, the protocol the
lab speaks (the lab itself on hosts is tests/e2e/test_hosts.py).
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal, TypeVar

import psutil
import pytest
import redis

from labcore import hosts as proto
from labcore.hosts import HostState, Order, OrderKind, OrderReply, RunHostKeys, RunRequest
from labcore.keys import new_run_id, rq_prefix, run_prefix
from labcore.procs import free_port
from tests.support.helpers import TESTBED, SharedRedis

pytestmark = pytest.mark.e2e

T = TypeVar("T")


def _wait(predicate: Callable[[], T | Literal[False] | None], timeout: float = 30.0, what: str = "condition") -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what} not met within {timeout} s")


@pytest.fixture
def shared_redis(tmp_path: Path) -> Iterator[SharedRedis]:
    password = secrets.token_hex(16)
    port = free_port()
    env = {**os.environ, "TESTBED_REDIS_PASSWORD": password}
    proc = subprocess.Popen(
        [*TESTBED, "redis", "--bind", "127.0.0.1", "--port", str(port), "--dir", str(tmp_path)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"redis://:{password}@127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    try:
        _wait(lambda: _pings(client), 10, "redis up")
        yield url, client
    finally:
        client.close()
        proc.terminate()
        proc.wait(10)


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


# A host that may not change its host's routing: without CAP_NET_ADMIN (as root, dropped from its bounding set).
NO_NET_ADMIN = ["setpriv", "--bounding-set", "-net_admin", "--"] if os.geteuid() == 0 else []

# The host's process, and a client of its Redis.
Host = tuple[subprocess.Popen[bytes], redis.Redis]


@pytest.fixture
def host(request: pytest.FixtureRequest, shared_redis: SharedRedis, tmp_path: Path) -> Iterator[Host]:
    url, client = shared_redis
    env = {**os.environ, "REDIS_URL": url, "TESTBED_HOST_NAME": "solo", "TESTBED_PROVIDER_TOKEN": "t" * 32}
    log = open(tmp_path / "host.log", "wb")  # noqa: SIM115 (closed below)
    wrap = NO_NET_ADMIN if getattr(request, "param", "") == "no-net-admin" else []
    proc = subprocess.Popen(
        [*wrap, *TESTBED, "host", "--workers", "2"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        _wait(lambda: client.exists(proto.live_key("solo")), 20, "host registered")
        yield proc, client
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(20)
        log.close()


def _ask(client: redis.Redis, ttl: int = proto.CONTROLLER_TTL) -> RunHostKeys:
    """What the lab does to ask the hosts for workers."""
    prefix = run_prefix(new_run_id())
    keys = RunHostKeys(prefix)
    request = RunRequest(prefix, rq_prefix(prefix), "ops", "http://127.0.0.1:9", ["solo"], 20, 5, 5)
    client.set(keys.controller, 1, ex=ttl)
    client.set(keys.request, proto.encode(request))
    client.sadd(proto.RUNS, prefix)
    return keys


def _state(client: redis.Redis, keys: RunHostKeys) -> HostState | None:
    raw = client.get(keys.state("solo"))
    return None if raw is None else proto.decode(HostState, raw)


def _order(client: redis.Redis, keys: RunHostKeys, order: Order) -> OrderReply:
    client.rpush(keys.orders("solo"), proto.encode(order))
    popped = client.blpop([keys.reply(order.id)], timeout=15)
    assert popped is not None, "the host did not answer"
    return proto.decode(OrderReply, popped[1])


def test_host_daemon_refuses_pids_that_are_not_work_horses_of_its_workers(
    host: Host,
) -> None:
    _proc, client = host
    keys = _ask(client)
    state = _wait(lambda: (s := _state(client, keys)) and len(s.workers) == 2 and s, what="workers started")
    name, worker_pid = next(iter(state.workers.items()))
    assert name.startswith("solo.")
    for pid, worker in ((os.getpid(), name), (worker_pid, name), (worker_pid, "someone-else.w1")):
        reply = _order(client, keys, Order(proto.new_order_id(), OrderKind.KILL, worker, pid, True))
        assert not reply.ok and "refusing to kill" in reply.error
    assert psutil.pid_exists(os.getpid()) and psutil.Process(worker_pid).status() != psutil.STATUS_ZOMBIE
    # Its workers run with the run's key prefix, the secrets in their environment, none on their command line.
    process = psutil.Process(worker_pid)
    assert process.environ()["RQ_KEY_PREFIX"] == rq_prefix(keys.prefix)
    assert "RQ_REDIS_URL" in process.environ() and "TESTBED_PROVIDER_TOKEN" in process.environ()
    command = " ".join(process.cmdline())
    assert process.environ()["RQ_REDIS_URL"].split("@")[0].split(":")[-1] not in command
    assert "t" * 32 not in command
    # The run ends: the host stops its workers and says so.
    client.srem(proto.RUNS, keys.prefix)
    client.delete(keys.request)
    _wait(lambda: (s := _state(client, keys)) and s.stopped, what="workers stopped")
    assert not psutil.pid_exists(worker_pid) or psutil.Process(worker_pid).status() == psutil.STATUS_ZOMBIE


@pytest.mark.parametrize("host", ["as-started", "no-net-admin"], indirect=True)
def test_a_host_daemon_cuts_off_only_a_provider_on_another_host_and_only_if_it_may(
    host: Host, request: pytest.FixtureRequest
) -> None:
    """Its registration says whether it may change its host's routing (as root it
    may, unless CAP_NET_ADMIN was taken away); a provider on its own host (here:
    loopback) is refused all the same. Nothing is cut either way."""
    _proc, client = host
    live = client.get(proto.live_key("solo"))
    assert live is not None, "the host is not registered"
    registered = proto.decode(proto.Registration, live)
    may = os.geteuid() == 0 and request.node.callspec.params["host"] == "as-started"
    assert (registered.no_partition == "") == may
    keys = _ask(client)
    _wait(lambda: (s := _state(client, keys)) and len(s.workers) == 2, what="workers started")
    reply = _order(client, keys, Order(proto.new_order_id(), OrderKind.CUT, "", hit="h1"))
    assert not reply.ok
    if may:
        assert "is on this host: a partition needs it on another" in reply.error
    else:
        assert "CAP_NET_ADMIN" in registered.no_partition and "cannot cut its host off" in reply.error
    rules = subprocess.run(["ip", "rule", "show"], capture_output=True, text=True).stdout
    assert "blackhole" not in rules and rules.startswith("0:")
    client.srem(proto.RUNS, keys.prefix)
    client.delete(keys.request)


def test_workers_stop_when_the_runs_controller_stops_beating(host: Host) -> None:
    _proc, client = host
    keys = _ask(client, ttl=2)  # nobody refreshes it: the controller "died"
    state = _wait(lambda: (s := _state(client, keys)) and len(s.workers) == 2 and s, what="workers started")
    pids = list(state.workers.values())
    _wait(lambda: (s := _state(client, keys)) and s.stopped, 20, "workers stopped")
    assert all(not psutil.pid_exists(p) or psutil.Process(p).status() == psutil.STATUS_ZOMBIE for p in pids)
    client.srem(proto.RUNS, keys.prefix)


def test_a_stopped_host_daemon_leaves_nothing(host: Host) -> None:
    proc, client = host
    keys = _ask(client)
    state = _wait(lambda: (s := _state(client, keys)) and len(s.workers) == 2 and s, what="workers started")
    family = psutil.Process(proc.pid).children(recursive=True)
    assert {p.pid for p in family} >= set(state.workers.values())
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0
    _gone, alive = psutil.wait_procs(family, timeout=5)
    assert alive == []
    assert not client.exists(proto.live_key("solo"))
    client.srem(proto.RUNS, keys.prefix)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["chaos", "--hosts", "-f", "provider-crash"], "provider-crash needs a provider this run starts"),
        (["chaos", "--hosts"], "--hosts needs --provider-url"),
        (["chaos", "--provider-url", "http://127.0.0.1:9"], "--provider-url needs --hosts"),
        (["host", "--workers", "2"], "testbed host needs --redis-url"),
        (
            ["chaos", "-f", "partition"],
            "partition cuts a worker's host off from the provider: it needs the worker hosts",
        ),
        (["redis", "--port", "6390"], "TESTBED_REDIS_PASSWORD must hold a password"),
    ],
)
def test_what_cannot_run_is_refused_up_front(args: list[str], says: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TESTBED_", "REDIS_URL"))}
    if "provider-crash" in args:
        env |= {"REDIS_URL": "redis://:x@127.0.0.1:9/0", "TESTBED_PROVIDER_URL": "http://127.0.0.1:9"}
    done = subprocess.run([*TESTBED, *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("testbed: error: ") and says in lines[0], done.stderr


def _run_on_hosts(url: str, tmp_path: Path, extra: list[str]) -> subprocess.CompletedProcess[str]:
    """A run with --hosts against a provider of its own, once that provider answers."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TESTBED_", "REDIS_URL"))}
    provider_port = free_port()
    provider = subprocess.Popen(
        [*TESTBED[:1], "-m", "provider", "--port", str(provider_port), "--db", str(tmp_path / "p.sqlite3")],
        env={**env, "TESTBED_PROVIDER_TOKEN": "t" * 32},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        args = ["chaos", "--hosts", "--no-store", "--provider-url", f"http://127.0.0.1:{provider_port}", *extra]
        env |= {"REDIS_URL": url, "TESTBED_PROVIDER_TOKEN": "t" * 32}
        done = None
        for _ in range(50):  # until the provider answers
            done = subprocess.run([*TESTBED, *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
            if "cannot reach the provider" not in done.stderr:
                break
            time.sleep(0.2)
        assert done is not None
        return done
    finally:
        provider.terminate()
        provider.wait(10)


def test_no_host_registered_is_a_setup_error(shared_redis: SharedRedis, tmp_path: Path) -> None:
    done = _run_on_hosts(shared_redis[0], tmp_path, [])
    assert done.returncode == 2
    assert "no host is registered with Redis" in done.stderr and ":***@" in done.stderr, done.stderr


@pytest.mark.parametrize("host", ["no-net-admin"], indirect=True)
def test_a_partition_run_is_refused_when_a_host_may_not_cut(
    shared_redis: SharedRedis, host: Host, tmp_path: Path
) -> None:
    _proc, client = host
    done = _run_on_hosts(shared_redis[0], tmp_path, ["-f", "partition"])
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "partition: host solo cannot cut its machine off the provider" in lines[0], done.stderr
    assert not client.smembers(proto.RUNS)  # refused before the run asked for any worker
