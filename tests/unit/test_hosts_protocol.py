"""The hosts' protocol messages, and the provider's choice of bus per run."""

import pytest

from labcore import hosts as proto
from labcore.boundaries import Boundary
from labcore.events import Hit
from labcore.faults import Fault
from labcore.hosts import HostState, Order, OrderKind, OrderReply, RunRequest
from labcore.keys import new_run_id, run_prefix
from provider.buses import RunBuses


def test_messages_round_trip() -> None:
    for message in (
        RunRequest("testbed:x", "testbed:x:rq", "ops", "http://p:8080", ["a1", "a2"], 20, 5, 5),
        HostState({"a1.w1": 10}, ["a1.w2: died"], False),
        HostState(stopped=True, swept=3),
        Order(proto.new_order_id(), OrderKind.KILL, "a1.w1", 1234, True),
        OrderReply("o1", True, victims=[10, 11], at=1.5, confirmed_ms=2.0),
    ):
        assert proto.decode(type(message), proto.encode(message)) == message


@pytest.mark.parametrize("raw", ["[]", "{}", "not json", '{"id": "x", "kind": "kill", "worker": "w", "bogus": 1}'])
def test_a_message_that_is_not_one_is_refused(raw: str) -> None:
    with pytest.raises(ValueError):
        proto.decode(Order, raw)


def test_a_run_on_hosts_counts_what_each_host_swept_as_it_stopped_the_runs_workers() -> None:
    """A host's stopped state says what it found of the run's jobs (one that says nothing, an older
    host's, found none); a host gone, its state with it, says nothing."""
    from testbed.infra.hosts import HostStack

    older = proto.decode(HostState, '{"workers": {}, "dead": [], "stopped": true}')
    states = {"a1": HostState(stopped=True, swept=2), "a2": older, "a3": None, "a4": HostState(stopped=True, swept=5)}

    class Pool:
        def states(self) -> dict[str, HostState | None]:
            return states

    stack = HostStack.__new__(HostStack)  # its parts are the hosts': only their states are read here
    stack.pool = Pool()  # type: ignore[assignment]
    assert stack.swept() == 7


def test_live_keys_name_their_host() -> None:
    assert proto.host_of_live_key(proto.live_key("host-12")) == "host-12"


def _hit(bus: str) -> Hit:
    return Hit("c001:10:1:after-effect", "c001", "op", 1, Boundary.AFTER_EFFECT, Fault.KILL, 1, "w1", bus=bus)


def test_a_provider_for_many_runs_reports_to_the_run_its_hit_names_and_nowhere_else() -> None:
    buses = RunBuses(redis=None)  # type: ignore[arg-type]  # no command is sent here
    prefix = run_prefix(new_run_id())
    bus = buses.of(_hit(prefix))
    assert bus is not None and bus.keys.prefix == prefix and buses.of(_hit(prefix)) is bus
    for elsewhere in ("", "testbed", "rq:queue", "testbed:hosts", f"{prefix}:x", "other:20250101-000000-abcdef"):
        assert buses.of(_hit(elsewhere)) is None


def test_the_hit_header_carries_the_run() -> None:
    prefix = run_prefix(new_run_id())
    assert Hit.from_header(_hit(prefix).header()).bus == prefix
    # A hit from before the field existed still parses (no run: a single-run provider ignores it).
    legacy = _hit(prefix).header().replace(f',"bus":"{prefix}"', "")
    assert Hit.from_header(legacy).bus == ""


def test_a_hosts_kill_whose_work_horse_was_gone_is_told_from_a_refusal() -> None:
    """The host's reply says the work-horse had already been reaped: the controller hears it as
    a kill whose attempt had ended (HorseGone), not as the lab's failure; any other refusal stays one."""
    from testbed.errors import RunFailure
    from testbed.infra.hosts import RemoteWorker
    from testbed.nemesis.host_kills import HostKiller
    from testbed.nemesis.kills import HorseGone

    replies = [OrderReply("o1", False, "host a1: pid 9 had exited", gone=True), OrderReply("o2", False, "no")]
    assert proto.decode(OrderReply, proto.encode(replies[0])) == replies[0]

    class Pool:
        def __init__(self) -> None:
            self.workers = {"a1.w1": RemoteWorker("a1.w1", "a1", 10)}

        def order(self, host: str, order: Order) -> OrderReply:
            return replies.pop(0)

    killer = HostKiller(Pool())  # type: ignore[arg-type]
    with pytest.raises(HorseGone, match="pid 9 had exited and been reaped"):
        killer.kill(9, False, "a1.w1")
    with pytest.raises(RunFailure, match=r"^no$") as refused:
        killer.kill(9, False, "a1.w1")
    assert not isinstance(refused.value, HorseGone)
