"""explore's space of trials (pure): what it draws is runnable, and shrinking simplifies
a trial as a reader would (Hypothesis's own shrinker, on the space's strategies)."""

from collections.abc import Callable, Sequence

from hypothesis import HealthCheck, find, given, settings

from labcore.boundaries import ORDER, Boundary
from labcore.delivery import policy_of
from labcore.faults import RULES, Fault
from labcore.plan import Armed
from labcore.redelivery import Redelivery
from labcore.schedule import Schedule
from testbed.engines.celery import Celery
from testbed.experiment.scenarios import SCENARIOS
from testbed.experiment.schedules import HELD_FOR_DUPLICATE, problem
from testbed.explore.space import (
    Target,
    Trial,
    batches,
    faults_for,
    fitted,
    reachable,
    scenarios_for,
    trials,
)

B, F = Boundary, Fault
TARGETS = (Target("reconcile", False), Target("jobs:send", True))
EVERYWHERE = ("none", "duplicate-enqueue", "remint", "withdrawn")
# Derandomized: the shrinker then reaches the same minimum on every machine and run.
QUICK = settings(
    max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None, derandomize=True
)


@QUICK
@given(trials(TARGETS, EVERYWHERE, max_ops=4, retries=3))
def test_every_trial_drawn_is_one_the_lab_can_run(trial: Trial) -> None:
    schedule = trial.schedule
    assert problem(schedule) is None
    assert 1 <= len(schedule.ops) <= 4 and schedule.retries == 3
    # The last attempt always runs clean: a job never runs out of retries by the draw alone.
    assert all(a.attempt <= 3 for a in schedule.strikes)
    assert Fault.PARTITION not in schedule.faults
    assert all(a.boundary in RULES[a.fault].boundaries for a in schedule.strikes)
    if Fault.PROVIDER_CRASH in schedule.faults:  # a crash loses what the provider holds: one op, no late
        assert sum(bool(op) for op in schedule.ops) == 1
        assert Fault.LATE not in schedule.faults


@QUICK
@given(trials(TARGETS, EVERYWHERE, max_ops=4, retries=3, faults=faults_for(hosts=True)))
def test_across_hosts_a_trial_may_cut_a_host_off_and_is_then_one_op(trial: Trial) -> None:
    schedule = trial.schedule
    assert problem(schedule) is None
    assert Fault.PROVIDER_CRASH not in schedule.faults
    if Fault.PARTITION in schedule.faults:  # the cut is the whole host's: no other op's requests in flight
        assert len(schedule.ops) == 1


def test_partition_is_drawn_across_hosts_only() -> None:
    assert Fault.PARTITION in faults_for(hosts=True) and Fault.PROVIDER_CRASH not in faults_for(hosts=True)
    assert Fault.PARTITION not in faults_for(hosts=False)
    space = trials(TARGETS, ("none",), 4, retries=3, faults=faults_for(hosts=True))
    # One trial in ten may draw a fault that makes it run alone: more examples than QUICK's.
    cut = find(space, lambda t: Fault.PARTITION in t.schedule.faults, settings=settings(QUICK, max_examples=2000))
    assert cut.schedule.ops == ((Armed(1, B.BEFORE_EFFECT, F.PARTITION),),)


def smallest(condition: Callable[[Trial], bool], scenarios: Sequence[str] = ("none",), max_ops: int = 4) -> Trial:
    space = trials(TARGETS, scenarios, max_ops, retries=3)
    return find(space, condition, settings=QUICK)


def test_shrinking_goes_to_one_op_the_first_attempt_and_the_simplest_fault() -> None:
    found = smallest(lambda t: bool(t.schedule.strikes))
    assert found.target == TARGETS[0]
    assert found.schedule.ops == ((Armed(1, B.JOB_START, F.KILL),),)


def test_shrinking_keeps_what_the_failure_needs_and_drops_the_rest() -> None:
    def needs_a_recovery_fault_after_the_effect(t: Trial) -> bool:
        # Both faults on the same op: strikes spread over two ops are a different (and as small) trial.
        return any(
            any(a.attempt >= 2 and a.boundary is B.AFTER_EFFECT for a in op) and any(a.attempt == 1 for a in op)
            for op in t.schedule.ops
        )

    found = smallest(needs_a_recovery_fault_after_the_effect)
    assert found.schedule.ops == ((Armed(1, B.JOB_START, F.KILL), Armed(2, B.AFTER_EFFECT, F.KILL)),)


def test_the_plainer_scenario_and_the_duplicate_delivery() -> None:
    found = smallest(lambda t: t.schedule.scenario != "none", scenarios=EVERYWHERE)
    assert (found.schedule.scenario, found.schedule.ops) == ("duplicate-enqueue", ((),))
    held = smallest(lambda t: HELD_FOR_DUPLICATE in t.schedule.strikes, scenarios=EVERYWHERE)
    assert held.schedule.ops == ((HELD_FOR_DUPLICATE,),)


def test_a_batch_shrinks_to_the_one_trial_that_fails() -> None:
    space = batches(trials(TARGETS, ("none",), 3, 3), 4)
    found = find(space, lambda batch: any(t.target.handler for t in batch), settings=QUICK)
    assert len(found) == 1 and found[0].target == TARGETS[1] and found[0].schedule.ops == ((),)


@QUICK
@given(trials(TARGETS, ("duplicate-enqueue",), max_ops=4, retries=3, max_held=1))
def test_a_trial_holds_fewer_ops_than_there_are_workers(trial: Trial) -> None:
    # With every worker holding an op for its duplicate, no duplicate would run.
    assert len(trial.schedule.held) <= 1 and problem(trial.schedule) is None


def test_holds_past_the_bound_are_released_from_the_last_ops() -> None:
    held = Schedule(((HELD_FOR_DUPLICATE,), (), (HELD_FOR_DUPLICATE,), (HELD_FOR_DUPLICATE,)), "duplicate-enqueue")
    assert fitted(held, max_held=1).held == (0,)
    assert fitted(held, max_held=3) == held


def celery(delivery: str) -> Redelivery:
    """What the queue does with a struck attempt under this Celery setting, with 3 retries."""
    policy = policy_of(delivery, 3)
    assert policy is not None
    return policy


def test_on_celery_an_op_is_struck_only_on_attempts_its_setting_runs() -> None:
    kill, timeout = Armed(1, B.BEFORE_EFFECT, F.KILL), Armed(1, B.BEFORE_EFFECT, F.TIMEOUT)
    again = (Armed(2, B.AFTER_EFFECT, F.KILL), Armed(3, B.JOB_START, F.KILL))
    assert policy_of(None, 3) is None and policy_of("app", 3) is None  # RQ, and a user's app: every attempt
    # Early ack: a killed or failed attempt is the op's last.
    assert reachable((kill, *again), celery("early-ack")) == (kill,)
    # A lost task requeued for ever: every kill reached; an error is not retried.
    assert reachable((kill, *again), celery("reject-on-lost")) == (kill, *again)
    assert reachable((timeout, *again), celery("reject-on-lost")) == (timeout,)
    # autoretry retries what raised, a kill never; an attempt left clean ends the op unless it raised.
    assert reachable((timeout, *again), celery("autoretry")) == (timeout, again[0])
    assert reachable((kill, *again), celery("autoretry")) == (kill,)
    assert reachable(again, celery("autoretry")) == again[:1]
    assert reachable(again, celery("acks-late")) == ()


@QUICK
@given(
    trials(
        TARGETS,
        ("none",),
        max_ops=3,
        retries=3,
        faults=faults_for(False, whole_workers=False),
        policy=policy_of("early-ack", 3),
    )
)
def test_under_early_ack_a_trial_strikes_first_attempts_and_never_a_whole_worker(trial: Trial) -> None:
    assert all(a.attempt == 1 for a in trial.schedule.strikes)
    assert Fault.KILL_WORKER not in trial.schedule.faults and problem(trial.schedule) is None


def test_scenarios_drawn_on_each_engine() -> None:
    assert scenarios_for([], None) == scenarios_for([], "acks-late") == ("none", "duplicate-enqueue")
    assert scenarios_for([], "early-ack") == scenarios_for([], "autoretry") == ("none",)
    assert scenarios_for(["remint"], "early-ack") == ("remint",)
    # A user's app's options are its own: it may acknowledge early too, if the user says so.
    assert scenarios_for([], "app") == ("none",) and scenarios_for(["duplicate-enqueue"], "app") == (
        "duplicate-enqueue",
    )
    # Acknowledged as it starts, a held op's worker takes the next message: perhaps its own duplicate.
    refused = Celery.refused(SCENARIOS["duplicate-enqueue"], "early-ack", scheduled=True)
    assert refused is not None and refused.startswith("scenario duplicate-enqueue under early-ack: a worker holding")


def test_every_boundary_is_drawn_against_a_destination_too() -> None:
    """A job on its own SDK passes all six (workers.http_probes): the space is the same for it."""
    drawn: set[Boundary] = set()

    @QUICK
    @given(trials(TARGETS, ("none",), max_ops=4, retries=3, faults=(Fault.KILL,)))
    def collect(trial: Trial) -> None:
        drawn.update(a.boundary for op in trial.schedule.ops for a in op)

    collect()
    assert drawn == set(ORDER)
