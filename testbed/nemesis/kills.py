"""SIGKILL, only for processes of this run, confirmed dead before anything goes on.

Each victim is held (`labcore.procs.Held`: a pidfd on Linux) from before the check
that it is the run's to its confirmed exit: the signal reaches that process or
nobody, never one that took its pid after it was reaped, and the kernel wakes the
confirmation as it exits."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from labcore.procs import Held, all_exited
from testbed.errors import RunFailure
from testbed.infra.provider_process import ProviderProcess
from testbed.infra.supervisor import Supervisor, WorkerProcess

_CONFIRM_TIMEOUT = 5.0


class NamedWorker(Protocol):
    """A worker as the controller names it: one this process started, or a host's."""

    @property
    def name(self) -> str: ...


W = TypeVar("W", bound=NamedWorker)


@dataclass(frozen=True, slots=True)
class Kill(Generic[W]):
    owner: W  # the worker whose work-horse was hit
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
    """A worker host cut off from the provider, or healed, by its host."""

    host: str  # the host
    at: float
    confirmed_ms: float


class HorseGone(RunFailure):
    """The work-horse a kill was for had exited and been reaped before the kill could hold it:
    its attempt had ended (its client gave up, say) before the lab reached it. The plan could
    not be carried out, and the kill reached nobody; the controller says why it ended."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        super().__init__(f"pid {pid} had exited and been reaped before the kill: its attempt had ended")


_NO_CUT = "partition cuts a worker host off the network: it needs the worker hosts (--hosts)"


class Killing(Protocol[W]):
    """The controller's hands: kills, crashes and cuts, carried out by this process on
    the workers and provider it started (Killer), or by the hosts on theirs
    (testbed.nemesis.host_kills.HostKiller). Each confirms what it did before it returns."""

    @property
    def provider_pid(self) -> int:
        """The provider process this run can crash; 0 if none."""
        ...

    def kill(self, horse_pid: int, whole_worker: bool, worker: str = "") -> Kill[W]: ...

    def replace(self, worker: W) -> W:
        """A fresh worker in place of one killed whole."""
        ...

    def crash_provider(self) -> Crash: ...

    def cut(self, hit: str, worker: str) -> Cut: ...

    def heal(self, hit: str) -> Cut: ...


class Killer:
    def __init__(self, supervisor: Supervisor, provider: ProviderProcess | None) -> None:
        """No provider: one this process did not start (a host's), which it cannot crash."""
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
        with Held(pid) as provider:
            at = time.time()
            provider.kill()
            _confirm([provider])
        confirmed = time.time()
        self._provider.relaunch()
        return Crash(pid, at, (confirmed - at) * 1000, (time.time() - confirmed) * 1000)

    def cut(self, hit: str, worker: str) -> Cut:
        raise RunFailure(_NO_CUT)

    def heal(self, hit: str) -> Cut:
        raise RunFailure(_NO_CUT)

    def kill(self, horse_pid: int, whole_worker: bool, worker: str = "") -> Kill[WorkerProcess]:
        """The work-horse (and, if asked, its worker first, so it cannot requeue the job itself).
        `worker`, when given, is the worker the hit came from: the pid must be its work-horse."""
        # Held from before the check of whose it is to the kill: if the pid changed hands in
        # between, the signal reaches nobody.
        with contextlib.ExitStack() as holding:
            horse = holding.enter_context(Held(horse_pid))
            if horse.reaped:  # no process has the pid: not another's, but ours, gone
                raise HorseGone(horse_pid)
            horse_born = horse.born() if whole_worker else 0.0  # read as the work-horse is held
            owner = self._supervisor.owner_of(horse_pid)
            if owner is None or (worker and owner.name != worker):
                raise RunFailure(f"refusing to kill pid {horse_pid}: not a work-horse of this run's workers")
            held = [horse]
            if whole_worker:
                # The worker's pid was read as the work-horse's parent before it was held: if the
                # worker died in between, the pid may have gone to a process born after its work-horse.
                held.insert(0, holding.enter_context(Held(owner.pid)))
                if held[0].born() > horse_born:
                    raise RunFailure(f"refusing to kill pid {owner.pid}: born after its work-horse {horse_pid}")
            at = time.time()
            # A worker already reaped is already gone; its work-horse may already have died
            # with it, which its own kill finds out (a signal to it then reaches nobody).
            already_gone = [h.pid for h in held if h.reaped]
            for h in held:
                h.kill()
            _confirm(held)
        victims = [h.pid for h in held]
        return Kill(owner, victims, at, (time.time() - at) * 1000, already_gone)

    def replace(self, worker: WorkerProcess) -> WorkerProcess:
        """A killed worker is reaped and a fresh one takes its place."""
        worker.killed = True
        return self._supervisor.replace(worker)


def _confirm(held: list[Held]) -> None:
    if not all_exited(held, _CONFIRM_TIMEOUT):
        raise RunFailure(f"pid(s) {[h.pid for h in held]} still alive {_CONFIRM_TIMEOUT:.0f} s after SIGKILL")
