"""The work-horse's probe over an in-memory Redis: what it knows of its own armed call."""

import fakeredis
import pytest

from labcore.boundaries import Boundary
from labcore.bus import Bus
from labcore.events import Hit
from labcore.faults import Fault
from labcore.keys import RunKeys
from labcore.plan import Armed
from workers.instrument import Probe


@pytest.fixture
def bus() -> Bus:
    return Bus(fakeredis.FakeRedis(), RunKeys("testbed:run"))


def probe(bus: Bus, *armed: Armed) -> Probe:
    return Probe(bus, "c001", "op-10", 10, 1, armed)


def test_an_unanswered_call_is_the_crash_only_if_its_armed_request_reached_its_boundary(bus: Bus) -> None:
    armed = probe(bus, Armed(1, Boundary.AFTER_EFFECT, Fault.PROVIDER_CRASH))
    # Another op's crash took the provider before this request reached its boundary.
    assert armed.died_unprocessed()
    header = armed.provider_hit()
    assert header is not None
    bus.report(Hit.from_header(header))  # as the provider does on reaching the boundary
    assert not armed.died_unprocessed()


def test_any_other_call_in_a_crash_cell_died_unprocessed(bus: Bus) -> None:
    """The provider drains before it dies: what was in progress finished first."""
    assert probe(bus).died_unprocessed()
    assert probe(bus, Armed(1, Boundary.AFTER_EFFECT, Fault.TIMEOUT)).died_unprocessed()
    assert probe(bus, Armed(2, Boundary.BEFORE_EFFECT, Fault.PROVIDER_CRASH)).died_unprocessed()  # a later attempt's
