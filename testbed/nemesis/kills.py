"""SIGKILL by pid, only for processes of this run, confirmed dead before anything goes on."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import psutil

from labcore.procs import gone
from testbed.errors import RunFailure
from testbed.infra.provider_process import ProviderProcess
from testbed.infra.supervisor import Supervisor, WorkerProcess

_CONFIRM_TIMEOUT = 5.0


@dataclass(frozen=True, slots=True)
class Kill:
    owner: WorkerProcess  # the worker whose work-horse was hit
    victims: list[int]
    at: float
    confirmed_ms: float
    already_gone: list[int]


@dataclass(frozen=True, slots=True)
class Crash:
    pid: int
    at: float
    confirmed_ms: float
    restarted_ms: float


@dataclass(frozen=True, slots=True)
class Cut:
    """A worker host cut off from the provider, or healed, by its agent."""

    host: str  # the agent
    at: float
    confirmed_ms: float


_NO_CUT = "partition cuts a worker host off the network: it needs the agents' hosts (--agents)"


class Killer:
    def __init__(self, supervisor: Supervisor, provider: ProviderProcess | None) -> None:
        """No provider: one this process did not start (an agent's), which it cannot crash."""
        self._supervisor = supervisor
        self._provider = provider

    @property
    def provider_pid(self) -> int:
        return 0 if self._provider is None else self._provider.pid

    def crash_provider(self) -> Crash:
        """SIGKILL the provider, confirm it is gone, start it again on its port and log."""
        if self._provider is None:
            raise RunFailure("the provider was not started by this run: it cannot be crashed")
        pid = self._provider.pid
        at = time.time()
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(pid).kill()
        _confirm([pid])
        confirmed = time.time()
        self._provider.relaunch()
        return Crash(pid, at, (confirmed - at) * 1000, (time.time() - confirmed) * 1000)

    def cut(self, hit: str, worker: str) -> Cut:
        raise RunFailure(_NO_CUT)

    def heal(self, hit: str) -> Cut:
        raise RunFailure(_NO_CUT)

    def kill(self, horse_pid: int, whole_worker: bool, worker: str = "") -> Kill:
        """The work-horse (and, if asked, its worker first, so it cannot requeue the job itself).
        `worker`, when given, is the worker the hit came from: the pid must be its work-horse."""
        owner = self._supervisor.owner_of(horse_pid)
        if owner is None or (worker and owner.name != worker):
            raise RunFailure(f"refusing to kill pid {horse_pid}: not a work-horse of this run's workers")
        victims = [owner.pid, horse_pid] if whole_worker else [horse_pid]
        at = time.time()
        already_gone = []
        for n, pid in enumerate(victims):
            try:
                psutil.Process(pid).kill()
            except psutil.NoSuchProcess:
                # A work-horse may already be gone once its worker is: it dies with its parent.
                if n == 0:
                    already_gone.append(pid)
        _confirm(victims)
        return Kill(owner, victims, at, (time.time() - at) * 1000, already_gone)

    def replace(self, worker: WorkerProcess) -> WorkerProcess:
        """A killed worker is reaped and a fresh one takes its place."""
        worker.killed = True
        return self._supervisor.replace(worker)


def _confirm(pids: list[int]) -> None:
    deadline = time.monotonic() + _CONFIRM_TIMEOUT
    while not all(gone(pid) for pid in pids):
        if time.monotonic() > deadline:
            raise RunFailure(f"pid(s) {pids} still alive {_CONFIRM_TIMEOUT:.0f} s after SIGKILL")
        time.sleep(0.001)
