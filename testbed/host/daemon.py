"""`testbed host`: one long-lived process per worker host.

It registers with Redis (a key it keeps alive), watches for runs that ask for
hosts' workers (labcore.hosts), starts its share of each run's `rq worker`
processes with the run's key prefix, and carries out the run's controller's
orders on them: kill a work-horse or a whole worker by pid (only a work-horse
of a worker it started for that run, held and confirmed gone as the run's own
kills are, by pidfd: `testbed.nemesis.kills`), and replace a killed worker.
Where it may change its host's routing, it also cuts its
host off from the run's provider and heals the cut (`partition`,
testbed.host.network). A run's workers stop, and any cut heals, when the run
withdraws its request or its controller stops beating. The host's workers die
with it (PDEATHSIG).

Secrets (the Redis URL's password, the provider token) reach the workers
through their environment only (testbed.infra.supervisor).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import redis as redis_lib

from labcore import connections
from labcore import hosts as proto
from labcore.credentials import redacted
from labcore.hosts import HostState, Order, OrderKind, OrderReply, Registration, RunHostKeys, RunRequest
from labcore.procs import stop_all
from testbed.engines.base import RQTimers
from testbed.errors import RunFailure, SetupError
from testbed.host import network
from testbed.infra import leftovers
from testbed.infra.liveness import PartDied, check_alive
from testbed.infra.supervisor import Supervisor
from testbed.nemesis.kills import HorseGone, Killer

_POLL = 0.25  # how often runs, heartbeats and workers are looked at
_STATE_TTL = 600  # a host's state of a run outlives the run only briefly if the run dies


def default_name() -> str:
    """Unique per host and per process: replicas of one image share a hostname pattern, not a name."""
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(slots=True)
class _Served:
    request: RunRequest
    keys: RunHostKeys
    supervisor: Supervisor
    killer: Killer
    workdir: Path
    dead: list[str] = field(default_factory=list)
    dead_names: set[str] = field(default_factory=set)
    cut_by: set[str] = field(default_factory=set)  # the hits this host is cut off from the run's provider for


# How long a host waits at start for its Redis to come up.
REDIS_WAIT = 60.0


class HostDaemon:
    def __init__(self, redis_url: str, name: str, workers: int, provider_token: str | None) -> None:
        self.name = name
        self.workers = workers
        self._url = redis_url
        self._token = provider_token
        self._redis = connections.from_url(redis_url, socket_connect_timeout=3, socket_timeout=10)
        # It heals what a host that died cutting left behind, if it may.
        self.no_partition = network.can_cut() or ""
        me = Registration(name, socket.gethostname(), os.getpid(), workers, self.no_partition)
        self._me = proto.encode(me)
        self._served: dict[str, _Served] = {}
        self._stopping = False

    # -- life ------------------------------------------------------------------

    def register(self, wait: float = REDIS_WAIT) -> None:
        """Register, waiting a while for a Redis that is not up yet: a host daemon
        may well start before the Redis it serves (as compose starts services)."""
        deadline = time.monotonic() + wait
        while True:
            try:
                if not self._redis.set(proto.live_key(self.name), self._me, nx=True, ex=proto.HOST_TTL):
                    raise SetupError(f"a host named {self.name!r} is already registered with this Redis")
                return
            except redis_lib.ConnectionError as exc:
                if time.monotonic() > deadline:
                    raise SetupError(f"cannot reach Redis at {redacted(self._url)}: {exc}") from None
                time.sleep(0.5)
            except (redis_lib.RedisError, ValueError) as exc:
                raise SetupError(f"cannot reach Redis at {redacted(self._url)}: {exc}") from None

    def stop(self, *_: object) -> None:
        self._stopping = True

    def run(self) -> None:
        """Until SIGTERM/SIGINT: then every worker stops and the registration goes."""
        next_beat = 0.0
        try:
            while not self._stopping:
                try:
                    if time.monotonic() >= next_beat:
                        next_beat = time.monotonic() + proto.HEARTBEAT
                        self._redis.set(proto.live_key(self.name), self._me, ex=proto.HOST_TTL)
                        self._notice_runs()
                    self._supervise()
                    self._serve_orders()
                except redis_lib.RedisError as exc:
                    # Redis may come back; the workers wait for it as RQ does.
                    print(f"testbed host {self.name}: Redis: {exc}", file=sys.stderr, flush=True)
                    time.sleep(1.0)
        finally:
            for prefix in list(self._served):
                self._end(prefix)
            with contextlib.suppress(redis_lib.RedisError):
                self._redis.delete(proto.live_key(self.name))
            self._redis.close()

    # -- runs ------------------------------------------------------------------

    def _notice_runs(self) -> None:
        """Start serving runs that name this host; stop serving runs that ended or lost their controller."""
        prefixes = {p.decode() for p in cast("set[bytes]", self._redis.smembers(proto.RUNS))}
        for prefix in list(self._served):
            keys = self._served[prefix].keys
            if prefix not in prefixes or self._redis.exists(keys.request, keys.controller) < 2:
                self._end(prefix)
        for prefix in prefixes - set(self._served):
            keys = RunHostKeys(prefix)
            raw, alive = self._redis.get(keys.request), self._redis.exists(keys.controller)
            if raw is None or not alive:
                continue
            try:
                request = proto.decode(RunRequest, raw)
            except ValueError:
                continue
            if self.name in request.hosts and request.prefix == prefix:
                self._begin(request)

    def _begin(self, request: RunRequest) -> None:
        workdir = Path(tempfile.mkdtemp(prefix=f"{leftovers.PREFIX}host-{self.name}-"))
        leftovers.claim(workdir)  # a run on this host clears it if the host was SIGKILLed
        settings = RQTimers(request.worker_ttl, request.maintenance_interval, request.job_monitoring_interval)
        supervisor = Supervisor(
            workdir, self._url, request.rq_prefix, request.queue, settings, self._token, name_prefix=f"{self.name}."
        )
        served = _Served(request, RunHostKeys(request.prefix), supervisor, Killer(supervisor, None), workdir)
        self._served[request.prefix] = served
        supervisor.start(self.workers)
        self._publish(served)
        print(f"testbed host {self.name}: serving {request.prefix} with {self.workers} worker(s)", file=sys.stderr)

    def _end(self, prefix: str) -> None:
        served = self._served.pop(prefix)
        if served.cut_by:
            network.heal()
        stop_all(served.supervisor.release())
        served.supervisor.close()
        shutil.rmtree(served.workdir, ignore_errors=True)
        with contextlib.suppress(redis_lib.RedisError):
            stopped = HostState(stopped=True, swept=served.supervisor.swept)  # counted by the run (HostStack)
            self._redis.set(served.keys.state(self.name), proto.encode(stopped), ex=_STATE_TTL)
        print(f"testbed host {self.name}: stopped the workers of {prefix}", file=sys.stderr, flush=True)

    def _publish(self, served: _Served) -> None:
        workers = {w.name: w.pid for w in served.supervisor.workers.values() if not w.killed}
        state = HostState(workers, list(served.dead))
        self._redis.set(served.keys.state(self.name), proto.encode(state), ex=_STATE_TTL)

    def _supervise(self) -> None:
        """A worker that died without an order is named in the state (the run's controller stops the run)."""
        for served in self._served.values():
            for worker in served.supervisor.workers.values():
                if worker.killed or worker.name in served.dead_names:
                    continue
                try:
                    check_alive(f"worker {worker.name} on host {self.name}", worker.proc, worker.log)
                except PartDied as exc:
                    served.dead_names.add(worker.name)
                    served.dead.append(str(exc))
                    self._publish(served)

    # -- orders ----------------------------------------------------------------

    def _serve_orders(self) -> None:
        if not self._served:
            time.sleep(_POLL)
            return
        by_key = {s.keys.orders(self.name): s for s in self._served.values()}
        popped = self._redis.blpop(list(by_key), timeout=_POLL)
        if popped is None:
            return
        served = by_key[cast(bytes, popped[0]).decode()]
        try:
            order = proto.decode(Order, popped[1])
        except ValueError:
            return
        reply = self._carry_out(served, order)
        key = served.keys.reply(order.id)
        with self._redis.pipeline() as pipe:
            pipe.rpush(key, proto.encode(reply))
            pipe.expire(key, 60)
            pipe.execute()
        self._publish(served)

    def _carry_out(self, served: _Served, order: Order) -> OrderReply:
        try:
            if order.kind == OrderKind.KILL:
                kill = served.killer.kill(order.horse_pid, order.whole, order.worker)
                if order.whole:
                    kill.owner.killed = True  # on purpose: not a death to report
                return OrderReply(
                    order.id,
                    True,
                    victims=kill.victims,
                    at=kill.at,
                    confirmed_ms=kill.confirmed_ms,
                    already_gone=kill.already_gone,
                )
            if order.kind == OrderKind.REPLACE:
                worker = served.supervisor.workers.get(order.worker)
                if worker is None or not worker.killed:
                    return OrderReply(order.id, False, f"no killed worker {order.worker!r} of host {self.name}")
                fresh = served.killer.replace(worker)
                return OrderReply(order.id, True, fresh=fresh.name, fresh_pid=fresh.pid)
            if order.kind in (OrderKind.CUT, OrderKind.HEAL):
                return self._partition(served, order)
            return OrderReply(order.id, False, f"unknown order {order.kind!r}")
        except HorseGone as exc:
            return OrderReply(order.id, False, f"host {self.name}: {exc}", gone=True)
        except RunFailure as exc:
            return OrderReply(order.id, False, f"host {self.name}: {exc}")

    def _partition(self, served: _Served, order: Order) -> OrderReply:
        if self.no_partition:
            return OrderReply(order.id, False, f"host {self.name} cannot cut its host off: {self.no_partition}")
        at = time.time()
        # Two hits on this host may overlap: the host stays cut until both have healed.
        if order.kind == OrderKind.CUT:
            if not served.cut_by:
                network.cut(network.peer_of(served.request.provider_url))
            served.cut_by.add(order.hit)
        else:
            served.cut_by.discard(order.hit)
            if not served.cut_by:
                network.heal()
        return OrderReply(order.id, True, at=at, confirmed_ms=(time.time() - at) * 1000)


def run_host(redis_url: str, name: str, workers: int, provider_token: str | None) -> None:
    host = HostDaemon(redis_url, name, workers, provider_token)
    host.register()
    signal.signal(signal.SIGTERM, host.stop)
    signal.signal(signal.SIGINT, host.stop)
    print(
        f"testbed host {name}: registered with Redis at {redacted(redis_url)}, {workers} worker(s) per run",
        file=sys.stderr,
        flush=True,
    )
    host.run()
