"""A stack the run did not start: a shared Redis, a provider on the network, and
the workers of the hosts registered there (`testbed host`, one per host).

The run asks the live hosts for workers (labcore.hosts), keeps its
controller's heartbeat up while it runs, orders kills and replacements
through Redis, and reads the provider's log over HTTP. At the end it
withdraws its request, waits until every host has stopped the run's
workers, and only then deletes its keys.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import httpx
import redis as redis_lib

from labcore import connections
from labcore import hosts as proto
from labcore.bus import Bus
from labcore.credentials import redacted
from labcore.hosts import HostState, Order, OrderReply, Registration, RunHostKeys, RunRequest
from labcore.keys import QUEUE, rq_prefix
from provider.store import ReferenceRecord
from testbed.errors import RunFailure, SetupError
from testbed.infra import leftovers
from testbed.infra.leftovers import delete_keys
from testbed.infra.liveness import PartDied
from testbed.infra.provider_process import ProviderAdmin, provider_client
from testbed.infra.stack import RunStack, connect

ORDER_TIMEOUT = 15.0  # a kill is confirmed in ms; a host that says nothing this long is gone
_STOP_TIMEOUT = 20.0  # hosts stop workers with a 5 s grace
_CHECK_EVERY = 0.5
_HEALTH_EVERY = 5.0
_RECORDS_CHUNK = 500  # references per audit request (the provider caps a body at 64 KiB)


@dataclass(slots=True)
class RemoteWorker:
    """A worker a host started for this run."""

    name: str
    host: str
    pid: int  # in the host's pid namespace
    killed: bool = False


def live_hosts(redis: redis_lib.Redis) -> dict[str, Registration]:
    found = {}
    for key in redis.scan_iter(match=proto.LIVE_PATTERN, count=100):
        raw = redis.get(key)
        with contextlib.suppress(ValueError):
            if raw is not None:
                found[proto.host_of_live_key(key.decode())] = proto.decode(Registration, raw)
    return found


class HostPool:
    """The run's side of the hosts: their workers, their health, and orders to them."""

    def __init__(self, redis: redis_lib.Redis, keys: RunHostKeys, hosts: dict[str, Registration]) -> None:
        self._redis = redis
        self._keys = keys
        self.hosts = hosts
        self.workers: dict[str, RemoteWorker] = {}

    def states(self) -> dict[str, HostState | None]:
        raws = self._redis.mget([self._keys.state(a) for a in self.hosts])
        pairs = zip(self.hosts, raws, strict=True)
        return {a: None if raw is None else proto.decode(HostState, raw) for a, raw in pairs}

    def check(self) -> None:
        """Every host still beating, none of their workers dead outside the plan."""
        with self._redis.pipeline(transaction=False) as pipe:
            for host in self.hosts:
                pipe.exists(proto.live_key(host))
            alive = pipe.execute()
        for host, beating in zip(self.hosts, alive, strict=True):
            if not beating:
                raise PartDied(f"host {host} stopped heartbeating during the run (its workers went with it)")
        for state in self.states().values():
            if state is not None and state.dead:
                raise PartDied(state.dead[0])

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until every host runs its workers and RQ has them all registered."""
        from rq import Worker

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check()
            states = self.states()
            if all(s is not None and len(s.workers) >= self.hosts[a].workers for a, s in states.items()):
                self.workers = {
                    name: RemoteWorker(name, host, pid)
                    for host, state in states.items()
                    if state is not None
                    for name, pid in state.workers.items()
                }
                registered = {w.name for w in Worker.all(connection=self._redis)}
                if set(self.workers) <= registered:
                    return
            time.sleep(0.05)
        raise RunFailure(f"the hosts' workers did not register with RQ within {timeout:.0f} s")

    def order(self, host: str, order: Order) -> OrderReply:
        self._redis.rpush(self._keys.orders(host), proto.encode(order))
        deadline = time.monotonic() + ORDER_TIMEOUT
        while time.monotonic() < deadline:
            popped = self._redis.blpop([self._keys.reply(order.id)], timeout=1)
            if popped is not None:
                return proto.decode(OrderReply, popped[1])
            if not self._redis.exists(proto.live_key(host)):
                raise PartDied(f"host {host} stopped heartbeating before it answered a {order.kind} order")
        raise RunFailure(f"host {host} did not answer a {order.kind} order within {ORDER_TIMEOUT:.0f} s")

    def stopped(self) -> bool:
        """Every host has stopped the run's workers (or is gone, and its workers with it)."""
        gone = [not self._redis.exists(proto.live_key(a)) for a in self.hosts]
        return all(g or (s is not None and s.stopped) for g, s in zip(gone, self.states().values(), strict=True))


class RemoteProvider:
    """A provider this run did not start: reached at its URL with its token."""

    db = None  # its log is on its own host: read over HTTP (RemoteLog)
    pid = 0
    mail_relay = None  # mail is relayed by a provider this host starts only

    def __init__(self, url: str, token: str | None) -> None:
        self.url = url.rstrip("/")
        self.job_url = self.url  # workers on other hosts reach it over the network
        self.token = token

    def check_reachable(self) -> None:
        with provider_client(self.url, self.token, timeout=5.0) as http:
            try:
                health = http.get("/health")
                audit = http.post("/ledgers/testbed-probe/audit", json={"references": []})
            except httpx.HTTPError as exc:
                raise SetupError(f"cannot reach the provider at {self.url}: {exc}") from None
        if health.status_code != 200:
            raise SetupError(f"the provider at {self.url} answered /health with {health.status_code}")
        if audit.status_code == 401:
            raise SetupError(f"the provider at {self.url} refused the token (401): set the one it was started with")
        if audit.status_code != 200:
            raise SetupError(f"the provider at {self.url} has no audit route ({audit.status_code}): an older version?")

    def healthy(self) -> bool:
        try:
            with provider_client(self.url, None, timeout=5.0) as http:
                return http.get("/health").status_code == 200
        except httpx.HTTPError:
            return False


class RemoteLog:
    """The checker's view of a remote provider's log (its audit route, provider/routes.py),
    as LogReader gives a local one."""

    def __init__(self, url: str, token: str | None) -> None:
        self._http = provider_client(url, token, timeout=30.0)

    def close(self) -> None:
        self._http.close()

    def _audit(self, ledger: str, references: list[str]) -> dict[str, Any]:
        from urllib.parse import quote

        response = self._http.post(f"/ledgers/{quote(ledger, safe='')}/audit", json={"references": references})
        response.raise_for_status()
        return cast(dict[str, Any], response.json())

    def effect_count(self, ledger: str) -> int:
        return int(self._audit(ledger, [])["effects"])

    def records(self, ledger: str, references: list[str] | tuple[str, ...]) -> dict[str, ReferenceRecord]:
        refs = list(references)
        out: dict[str, ReferenceRecord] = {}
        for start in range(0, len(refs), _RECORDS_CHUNK):
            found = self._audit(ledger, refs[start : start + _RECORDS_CHUNK])["records"]
            out |= {ref: ReferenceRecord(**fields) for ref, fields in found.items()}
        return out


class HostStack(RunStack):
    """A run's stack over parts it did not start: it starts nothing but a heartbeat."""

    provider: RemoteProvider
    log: RemoteLog

    def _start(self) -> None:
        o = self.options
        assert o.remote is not None
        if not o.redis_url:
            raise SetupError("--hosts needs --redis-url: the Redis the hosts are registered with")
        leftovers.remove_stale_dirs()
        # Nothing runs here; the dir is where the run store's log copy looks.
        self.workdir = Path(tempfile.mkdtemp(prefix=f"{leftovers.PREFIX}{self.run_id}-"))
        leftovers.claim(self.workdir)
        self._exit.callback(shutil.rmtree, self.workdir, ignore_errors=True)
        self.redis_url = o.redis_url
        self.redis = connect(o.redis_url, refuse_open=not o.redis_private)
        if not o.keep:
            self._exit.callback(delete_keys, self.redis, self.keys.pattern)
        self.bus = Bus(self.redis, self.keys)
        self.provider = RemoteProvider(o.remote.provider_url, o.remote.provider_token)
        self.provider.check_reachable()
        hosts = live_hosts(self.redis)
        if not hosts:
            raise SetupError(f"no host is registered with Redis at {redacted(o.redis_url)}: start `testbed host`")
        unable = {name: a.no_partition for name, a in hosts.items() if a.no_partition}
        if o.remote.partition and unable:
            name, why = sorted(unable.items())[0]
            raise SetupError(f"partition: host {name} cannot cut its machine off the provider: {why}")
        self.host_keys = RunHostKeys(self.keys.prefix)
        self.pool = HostPool(self.redis, self.host_keys, hosts)
        self._beating = threading.Event()
        beat = threading.Thread(target=self._beat, name="controller-heartbeat", daemon=True)
        self._exit.callback(beat.join, 5)
        self._exit.callback(self._beating.set)
        self.redis.set(self.host_keys.controller, 1, ex=proto.CONTROLLER_TTL)
        beat.start()
        s = o.settings
        request = RunRequest(
            self.keys.prefix,
            rq_prefix(self.keys.prefix),
            QUEUE,
            self.provider.url,
            sorted(hosts),
            s.worker_ttl,
            s.maintenance_interval,
            s.job_monitoring_interval,
        )
        self._exit.callback(self.stop_services)
        self.redis.set(self.host_keys.request, proto.encode(request))
        self.redis.sadd(proto.RUNS, self.keys.prefix)
        self._next_check = 0.0
        self._next_health = time.monotonic() + _HEALTH_EVERY

    def _beat(self) -> None:
        """The controller's heartbeat: the hosts stop this run's workers within CONTROLLER_TTL if it stops."""
        client = connections.from_url(self.redis_url, socket_connect_timeout=3, socket_timeout=5)
        try:
            while not self._beating.wait(proto.HEARTBEAT):
                with contextlib.suppress(redis_lib.RedisError):
                    client.set(self.host_keys.controller, 1, ex=proto.CONTROLLER_TTL)
        finally:
            client.close()

    def wait_ready(self) -> None:
        self.pool.wait_ready()
        # What the rows say about the run: the workers it had.
        self.options = replace(self.options, workers=len(self.pool.workers))
        self.admin = ProviderAdmin(self.provider.url, self.provider.token)
        self._exit.callback(self.admin.close)
        self.log = RemoteLog(self.provider.url, self.provider.token)
        self._exit.callback(self.log.close)

    def check(self) -> None:
        now = time.monotonic()
        if now < self._next_check:
            return
        self._next_check = now + _CHECK_EVERY
        self.pool.check()
        if now >= self._next_health:
            self._next_health = now + _HEALTH_EVERY
            if not self.provider.healthy():
                raise PartDied(f"the provider at {self.provider.url} stopped answering /health")

    def _live_workers(self) -> list[str]:
        return [w.name for w in self.pool.workers.values() if not w.killed]

    def swept(self) -> int:
        """What each host found of the run's jobs as it stopped their workers (a host gone says nothing)."""
        try:
            return sum(s.swept for s in self.pool.states().values() if s is not None)
        except redis_lib.RedisError:  # the run lost its Redis: said elsewhere
            return 0

    def stop_services(self) -> None:
        """Withdraw the request and wait until every host has stopped the run's workers."""
        with contextlib.suppress(redis_lib.RedisError):
            self.redis.srem(proto.RUNS, self.keys.prefix)
            self.redis.delete(self.host_keys.request)
            deadline = time.monotonic() + _STOP_TIMEOUT
            while not self.pool.stopped() and time.monotonic() < deadline:
                time.sleep(0.05)
