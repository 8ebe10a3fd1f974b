"""The chaos controller with fake collaborators: what it does for each fault, in which order."""

from dataclasses import dataclass, field, replace

import pytest

from labcore.boundaries import Boundary
from labcore.events import Event, EventKind, Hit, Side
from labcore.faults import Fault, Release
from labcore.ids import HitId
from labcore.keys import CellKeys
from labcore.plan import EveryNth
from testbed.errors import RunFailure
from testbed.experiment.scenarios import SCENARIOS, Scenario
from testbed.nemesis.controller import Controller
from testbed.nemesis.kills import Crash, Cut, Kill
from testbed.nemesis.recovery import Recover


@dataclass
class FakeBus:
    log: list[tuple[object, ...]] = field(default_factory=list)

    def release(self, hit: str, action: Release) -> None:
        self.log.append(("release", hit, action))

    def await_acted(self, hit: str, timeout: float = 0) -> bool:
        return True

    def settle(self, hit: str) -> None:
        self.log.append(("settle", hit))


@dataclass
class FakeWorker:
    name: str
    pid: int
    killed: bool = False


@dataclass
class FakeKiller:
    log: list[tuple[object, ...]]
    refuse: bool = False
    provider_pid: int = 7  # the provider the run started (hits' holder)

    def crash_provider(self) -> Crash:
        self.log.append(("crash", self.provider_pid))
        return Crash(self.provider_pid, 1.0, 0.5, 20.0)

    def kill(self, horse_pid: int, whole_worker: bool, worker: str = "") -> Kill[FakeWorker]:
        if self.refuse:
            raise RunFailure(f"refusing to kill pid {horse_pid}")
        self.log.append(("kill", horse_pid, whole_worker))
        owner = FakeWorker("w1", 10)
        return Kill(owner, [10, horse_pid] if whole_worker else [horse_pid], 1.0, 0.5, [])

    def replace(self, worker: FakeWorker) -> FakeWorker:
        self.log.append(("replace", worker.name))
        return FakeWorker("w2", 11)

    def cut(self, hit: str, worker: str) -> Cut:
        self.log.append(("cut", hit, worker))
        return Cut("host-a", 1.0, 2.0)

    def heal(self, hit: str) -> Cut:
        self.log.append(("heal", hit))
        return Cut("host-a", 3.0, 2.0)


@dataclass
class FakeWorld:
    log: list[tuple[object, ...]]

    def change(self, scenario: Scenario, cell: str, keys: CellKeys, ledger: str, op: str, seq: int) -> None:
        assert scenario.nemesis is not None
        self.log.append(("world", scenario.nemesis.value, op, seq))


def setup(
    fault: Fault, boundary: Boundary, scenario: str = "none", recover: Recover | None = None
) -> tuple[Controller, list[tuple[object, ...]], Hit]:
    log: list[tuple[object, ...]] = []
    bus = FakeBus(log)
    controller = Controller(bus, FakeKiller(log), FakeWorld(log), recover)  # type: ignore[arg-type]
    controller.begin("c001", "ledger", EveryNth(10, boundary, fault), SCENARIOS[scenario], CellKeys("k"))
    side = Side.PROVIDER if boundary.on_provider else Side.WORKER
    hid = str(HitId("c001", 10, 1, boundary))
    return controller, log, Hit(hid, "c001", "t:op:10", 1, boundary, fault, 99, "w1", side, 1.0)


def event(kind: EventKind, attempt: int) -> Event:
    return Event(kind, "c001", "t:op:10", attempt, 98, "w2", 2.0)


def test_a_kill_at_a_worker_boundary_kills_then_settles() -> None:
    controller, log, hit = setup(Fault.KILL, Boundary.AFTER_RECEIPT)
    controller.handle(hit)
    assert log == [("kill", 99, False), ("settle", hit.hit)]
    seen = controller.finish("c001")
    assert (seen.faults, seen.kill_count) == (1, 1)


def test_a_kill_at_the_provider_drops_the_request_only_after_the_kill() -> None:
    controller, log, hit = setup(Fault.KILL, Boundary.BEFORE_EFFECT)
    controller.handle(hit)
    assert log == [("kill", 99, False), ("release", hit.hit, Release.DROP), ("settle", hit.hit)]


def test_kill_worker_replaces_the_worker_and_forces_recovery() -> None:
    recovered: list[str] = []

    def recover(worker: str) -> list[str]:
        recovered.append(worker)
        return []

    controller, log, hit = setup(Fault.KILL_WORKER, Boundary.AFTER_EFFECT, recover=recover)
    controller.handle(hit)
    assert log[:2] == [("kill", 99, True), ("replace", "w1")]
    assert recovered == ["w1"]
    kinds = [e.kind for e in controller.finish("c001").history["t:op:10"]]
    assert kinds == [EventKind.HIT, EventKind.KILLED, EventKind.WORKER_RESTARTED, EventKind.RECOVERED]


def test_a_timeout_waits_for_the_client_to_give_up() -> None:
    controller, log, hit = setup(Fault.TIMEOUT, Boundary.AFTER_EFFECT)
    controller.handle(hit)
    assert log == []  # nothing killed, nothing released yet
    controller.handle(event(EventKind.CALL_TIMEOUT, 1))
    assert log == [("release", hit.hit, Release.RESPOND), ("settle", hit.hit)]


def test_an_armed_hit_fires_once_even_where_a_restarted_provider_forgot_it_fired() -> None:
    controller, log, hit = setup(Fault.PROVIDER_CRASH, Boundary.BEFORE_EFFECT)
    hit = replace(hit, holder=7)
    controller.handle(hit)
    assert log == [("crash", 7), ("settle", hit.hit)]
    del log[:]
    controller.handle(hit)  # the attempt sent again, to the provider restarted after the crash
    assert log == [("release", hit.hit, Release.APPLY)]
    assert controller.finish("c001").faults == 1


def test_a_client_that_gave_up_before_the_provider_reached_the_boundary_lets_it_go_at_the_hit() -> None:
    # A busy machine: the armed request reaches its boundary after the client timeout.
    controller, log, hit = setup(Fault.TIMEOUT, Boundary.BEFORE_EFFECT)
    controller.handle(event(EventKind.CALL_TIMEOUT, 1))
    assert log == []
    controller.handle(hit)
    assert log == [("release", hit.hit, Release.DROP), ("settle", hit.hit)]


@pytest.mark.parametrize(
    ("boundary", "action"), [(Boundary.BEFORE_EFFECT, Release.DROP), (Boundary.AFTER_EFFECT, Release.RESPOND)]
)
def test_a_partition_lets_the_request_go_into_the_cut_and_heals_before_the_retry(
    boundary: Boundary, action: Release
) -> None:
    controller, log, hit = setup(Fault.PARTITION, boundary)
    controller.handle(hit)
    # Cut first, so that whatever the provider answers is lost; the retry waits.
    assert log == [("cut", hit.hit, "w1"), ("release", hit.hit, action)]
    controller.handle(event(EventKind.CALL_TIMEOUT, 1))
    assert log[2:] == [("heal", hit.hit), ("settle", hit.hit)]
    kinds = [e.kind for e in controller.finish("c001").history["t:op:10"]]
    assert kinds == [EventKind.HIT, EventKind.PARTITIONED, EventKind.CALL_TIMEOUT, EventKind.HEALED]


def test_a_cut_still_in_place_when_the_cell_ends_is_healed() -> None:
    controller, log, hit = setup(Fault.PARTITION, Boundary.AFTER_EFFECT)
    controller.handle(hit)
    controller.finish("c001")
    assert log[-1] == ("heal", hit.hit)


def test_a_late_request_lands_once_the_retry_has_its_first_answer() -> None:
    controller, log, hit = setup(Fault.LATE, Boundary.BEFORE_EFFECT)
    controller.handle(hit)
    assert log == [("settle", hit.hit)]  # the retry may start at once
    controller.handle(event(EventKind.CONTACT, 1))  # the same attempt: nothing yet
    controller.handle(event(EventKind.CONTACT, 2))
    assert log[-1] == ("release", hit.hit, Release.APPLY)


def test_the_scenario_changes_the_world_before_the_retry() -> None:
    controller, log, hit = setup(Fault.KILL, Boundary.AFTER_EFFECT, scenario="withdrawn")
    controller.handle(hit)
    assert log[-2:] == [("world", "withdraw", "t:op:10", 10), ("settle", hit.hit)]


def test_an_unplanned_hit_is_an_anomaly_and_is_let_go() -> None:
    controller, log, hit = setup(Fault.KILL, Boundary.BEFORE_EFFECT)
    stray = Hit(
        str(HitId("c001", 3, 1, Boundary.BEFORE_EFFECT)),
        "c001",
        "op-3",
        1,
        hit.boundary,
        hit.fault,
        5,
        "w1",
        Side.PROVIDER,
    )
    controller.handle(stray)
    assert log == [("release", stray.hit, Release.DROP)]
    assert "unplanned hit" in controller.finish("c001").anomalies[0]


def test_held_requests_are_released_when_the_cell_ends() -> None:
    controller, log, hit = setup(Fault.TIMEOUT, Boundary.BEFORE_EFFECT)
    controller.handle(hit)
    controller.finish("c001")
    assert log == [("release", hit.hit, Release.DROP)]


def test_a_hit_in_a_cell_that_is_not_running_fails_the_run() -> None:
    controller, _, hit = setup(Fault.KILL, Boundary.AFTER_EFFECT)
    controller.finish("c001")
    with pytest.raises(RunFailure):
        controller.handle(hit)
