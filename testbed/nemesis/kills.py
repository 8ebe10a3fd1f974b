"""SIGKILL by pid, only for processes of this run, confirmed dead before anything goes on."""

from __future__ import annotations

import time
from dataclasses import dataclass

import psutil

from labcore.procs import gone
from testbed.errors import RunFailure
from testbed.infra.supervisor import Supervisor, WorkerProcess

_CONFIRM_TIMEOUT = 5.0


@dataclass(frozen=True, slots=True)
class Kill:
    owner: WorkerProcess  # the worker whose work-horse was hit
    victims: list[int]
    at: float
    confirmed_ms: float
    already_gone: list[int]


class Killer:
    def __init__(self, supervisor: Supervisor) -> None:
        self._supervisor = supervisor

    def kill(self, horse_pid: int, whole_worker: bool) -> Kill:
        """The work-horse (and, if asked, its worker first, so it cannot requeue the job itself)."""
        owner = self._supervisor.owner_of(horse_pid)
        if owner is None:
            raise RunFailure(f"refusing to kill pid {horse_pid}: not a work-horse of this run's workers")
        victims = [owner.pid, horse_pid] if whole_worker else [horse_pid]
        at = time.time()
        already_gone = []
        for pid in victims:
            try:
                psutil.Process(pid).kill()
            except psutil.NoSuchProcess:
                already_gone.append(pid)
        deadline = time.monotonic() + _CONFIRM_TIMEOUT
        while not all(gone(pid) for pid in victims):
            if time.monotonic() > deadline:
                raise RunFailure(f"pid(s) {victims} still alive {_CONFIRM_TIMEOUT:.0f} s after SIGKILL")
            time.sleep(0.001)
        return Kill(owner, victims, at, (time.time() - at) * 1000, already_gone)

    def replace(self, worker: WorkerProcess) -> WorkerProcess:
        """A killed worker is reaped and a fresh one takes its place."""
        worker.killed = True
        return self._supervisor.replace(worker)
