"""The chaos bus over an in-memory Redis: typed hits and events, releases, settling."""

import fakeredis
import pytest

from labcore.boundaries import Boundary
from labcore.bus import Bus, Wake
from labcore.events import Event, EventKind, Hit, Side
from labcore.faults import Fault, Release
from labcore.ids import HitId
from labcore.keys import RunKeys


@pytest.fixture
def bus() -> Bus:
    return Bus(fakeredis.FakeRedis(), RunKeys("testbed:run"))


def hit(attempt: int = 1, boundary: Boundary = Boundary.AFTER_EFFECT) -> Hit:
    hid = str(HitId("c001", 10, attempt, boundary))
    return Hit(hid, "c001", "op-10", attempt, boundary, Fault.KILL, 4242, "w1")


def test_hits_and_events_arrive_typed_and_in_order(bus: Bus) -> None:
    bus.report(hit())
    bus.emit(Event(EventKind.CONTACT, "c001", "op-10", 2, 7, "w2", 1.5, {"answer": "201"}))
    first, second = bus.next(timeout=0.1), bus.next(timeout=0.1)
    assert isinstance(first, Hit) and first.boundary is Boundary.AFTER_EFFECT and first.fault is Fault.KILL
    assert first.ts > 0 and first.side is Side.WORKER
    assert isinstance(second, Event) and second.kind is EventKind.CONTACT and second.data == {"answer": "201"}
    assert bus.next(timeout=0.01) is None


def test_what_is_queued_comes_whole_and_in_order_without_a_wait(bus: Bus) -> None:
    bus.report(hit())
    bus.emit(Event(EventKind.ATTEMPT_END, "c001", "op-10", 2, 7, "w2", 1.5, {"outcome": "done"}))
    queued = list(bus.queued())
    assert [type(m) for m in queued] == [Hit, Event]
    assert isinstance(queued[1], Event) and queued[1].kind is EventKind.ATTEMPT_END
    assert list(bus.queued()) == [] and bus.next(timeout=0.01) is None


def test_hits_reported_together_are_all_reported_and_queued_in_order(bus: Bus) -> None:
    first, second = hit(), hit(attempt=2)
    bus.report(first, second)
    assert bus.was_reported(first.hit) and bus.was_reported(second.hit)
    assert [m.hit if isinstance(m, Hit) else m for m in bus.queued()] == [first.hit, second.hit]


def test_a_release_reaches_the_holder_as_a_typed_action(bus: Bus) -> None:
    bus.release("c001:10:1:before-effect", Release.DROP)
    assert bus.await_release("c001:10:1:before-effect", timeout=0.5) is Release.DROP
    assert bus.await_release("c001:10:1:before-effect", timeout=0.05) is None


def test_a_retry_waits_only_for_faults_that_were_hit(bus: Bus) -> None:
    reported, never = hit(), hit(boundary=Boundary.JOB_START)
    bus.report(reported)
    assert bus.await_settled([reported.hit, never.hit], timeout=0.05) is False
    bus.settle(reported.hit)
    assert bus.await_settled([reported.hit, never.hit], timeout=0.05) is True


def test_acted_is_confirmed(bus: Bus) -> None:
    assert bus.await_acted("h", timeout=0.02) is False
    bus.acted("h")
    assert bus.await_acted("h", timeout=0.02) is True


def test_a_malformed_hit_header_is_a_value_error() -> None:
    assert Hit.from_header(hit().header()) == hit()
    for bad in ('{"hit": 1}', "[]", '{"attempt": "1"}', "not json"):
        with pytest.raises(ValueError):
            Hit.from_header(bad)


def test_a_drained_cell_wakes_the_loop_and_the_bus_comes_first(bus: Bus) -> None:
    cell = bus.keys.cell("c001")
    bus.redis.rpush(cell.drained, "op-100")
    assert bus.next(timeout=0.01) is None  # a list the caller did not name is not waited on
    bus.emit(Event(EventKind.CONTACT, "c001", "op-10", 1, 7, "w2", 1.5, {"answer": "201"}))
    assert isinstance(bus.next(timeout=0.1, drained=[cell.drained]), Event)
    assert bus.next(timeout=0.1, drained=[cell.drained]) is Wake.DRAINED
    assert bus.next(timeout=0.01, drained=[cell.drained]) is None
