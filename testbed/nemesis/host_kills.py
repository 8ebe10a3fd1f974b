"""Kills carried out by the hosts (testbed host) on their own hosts.

The controller's `kills.Killing`, as `kills.Killer` is: the controller names the work-horse's
pid and the worker the hit came from; the order goes to that worker's host,
which refuses a pid that is not a work-horse of a worker it started for this
run, SIGKILLs, confirms (as `kills.Killer` does) and reports back with its timing. A pid
means something only on its own host, so the worker's name picks the host.
"""

from __future__ import annotations

from typing import Any

from labcore.hosts import Order, OrderKind, OrderReply, new_order_id
from testbed.errors import RunFailure
from testbed.infra.hosts import HostPool, HostStack, RemoteWorker
from testbed.infra.stack import RunStack, Stack
from testbed.nemesis.kills import Crash, Cut, HorseGone, Kill, Killer, Killing


class HostKiller:
    def __init__(self, pool: HostPool) -> None:
        self._pool = pool
        self._cut: dict[str, str] = {}  # hit -> the host whose host it cut off

    @property
    def provider_pid(self) -> int:
        return 0  # not a process of this run: never crashed from here

    def crash_provider(self) -> Crash:
        raise RunFailure("the provider was not started by this run: it cannot be crashed")

    def kill(self, horse_pid: int, whole_worker: bool, worker: str = "") -> Kill[RemoteWorker]:
        owner = self._pool.workers.get(worker)
        if owner is None or owner.killed:
            raise RunFailure(f"refusing to kill pid {horse_pid}: {worker!r} is not a live worker of this run's hosts")
        reply = self._carried_out(owner.host, Order(new_order_id(), OrderKind.KILL, worker, horse_pid, whole_worker))
        if whole_worker:
            owner.killed = True
        return Kill(owner, reply.victims, reply.at, reply.confirmed_ms, reply.already_gone)

    def replace(self, worker: RemoteWorker) -> RemoteWorker:
        """The host reaps the killed worker and starts a fresh one for the run."""
        reply = self._carried_out(worker.host, Order(new_order_id(), OrderKind.REPLACE, worker.name))
        fresh = RemoteWorker(reply.fresh, worker.host, reply.fresh_pid)
        del self._pool.workers[worker.name]
        self._pool.workers[fresh.name] = fresh
        return fresh

    def cut(self, hit: str, worker: str) -> Cut:
        """The hit worker's host cuts its host off from the provider, and says when it is in place."""
        owner = self._pool.workers.get(worker)
        if owner is None:
            raise RunFailure(f"cannot cut off {worker!r}: not a worker of this run's hosts")
        reply = self._carried_out(owner.host, Order(new_order_id(), OrderKind.CUT, worker, hit=hit))
        self._cut[hit] = owner.host
        return Cut(owner.host, reply.at, reply.confirmed_ms)

    def heal(self, hit: str) -> Cut:
        host = self._cut.pop(hit)
        reply = self._carried_out(host, Order(new_order_id(), OrderKind.HEAL, "", hit=hit))
        return Cut(host, reply.at, reply.confirmed_ms)

    def _carried_out(self, host: str, order: Order) -> OrderReply:
        """The host's reply to an order it carried out; a refusal ends the run, with the host's reason."""
        reply = self._pool.order(host, order)
        if reply.gone:
            raise HorseGone(order.horse_pid)
        if not reply.ok:
            raise RunFailure(reply.error)
        return reply


def killer_for(stack: RunStack) -> Killing[Any]:
    """Kills by this process on the workers it started, or by the hosts on theirs."""
    if isinstance(stack, HostStack):
        return HostKiller(stack.pool)
    assert isinstance(stack, Stack)
    return Killer(stack.supervisor, stack.provider)
