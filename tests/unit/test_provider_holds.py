"""The provider connects its chaos bus at the first armed request, once, and never at its start."""

from __future__ import annotations

from labcore.boundaries import Boundary
from labcore.events import Hit
from labcore.faults import Fault
from provider.buses import RunBuses
from provider.gate import Gate
from provider.holds import Holds


def test_the_bus_is_connected_by_the_first_armed_request_and_only_once() -> None:
    connected: list[RunBuses] = []

    def connect() -> RunBuses:
        connected.append(RunBuses(redis=None))  # type: ignore[arg-type]  # no command is sent here
        return connected[-1]

    holds = Holds(connect, Gate())
    assert connected == []
    assert holds.at(Boundary.BEFORE_EFFECT, None) is None  # an unarmed request
    holds.done(Boundary.BEFORE_EFFECT, None)
    assert connected == []
    # Armed, but naming no run (RunBuses): not held, and the bus it asked for stays connected.
    hit = Hit("c001:10:1:before-effect", "c001", "op", 1, Boundary.BEFORE_EFFECT, Fault.KILL, 1, "w1", bus="elsewhere")
    assert holds.at(Boundary.BEFORE_EFFECT, hit) is None
    assert holds.at(Boundary.BEFORE_EFFECT, hit) is None
    holds.done(Boundary.BEFORE_EFFECT, hit)
    assert len(connected) == 1


def test_a_provider_without_a_bus_holds_nothing() -> None:
    hit = Hit("c001:10:1:after-effect", "c001", "op", 1, Boundary.AFTER_EFFECT, Fault.KILL, 1, "w1")
    assert Holds(None, Gate()).at(Boundary.AFTER_EFFECT, hit) is None
